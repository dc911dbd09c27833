package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/access"
)

func natsConfigCmd(g *globals) *cobra.Command {
	var dir string
	var fromServer, insecureOpen bool
	cmd := &cobra.Command{
		Use:   "nats-config --dir DIR [--from-server]",
		Short: "write the NATS accounts, users and permissions that dwr needs on a cluster you run",
		Long: "nats-config writes, in DIR: the service's nkey seed (" + access.ServiceSeedFile + ", for every `dwr serve --nats` replica),\n" +
			"the admin credential (" + access.AdminCredsFile + "), both made once and kept, and " + access.ClusterConfigFile + ": the accounts block to\n" +
			"include in each nats-server's configuration (`include dwr-accounts.conf`). With --from-server it also lists every\n" +
			"workspace's members (dwr users add) from the running service, as the admin: run it again after adding or revoking\n" +
			"users, copy the file to the servers and reload them (`nats-server --signal reload`).",
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return writeNatsConfig(g, dir, fromServer, insecureOpen, g.out)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "dwr-nats", "directory for the files")
	cmd.Flags().BoolVar(&fromServer, "from-server", false, "include the members of every workspace, read from the running service (--server, as --creds or DIR/"+access.AdminCredsFile+")")
	cmd.Flags().BoolVar(&insecureOpen, "insecure-open", false, "let connections without credentials in as admins (throwaway clusters only)")
	return cmd
}

func writeNatsConfig(g *globals, dir string, fromServer, insecureOpen bool, out io.Writer) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fail(exitInvalid, "--dir %s: %v", dir, err)
	}
	cc, err := access.OpenClusterConfig(dir)
	if err != nil {
		return err
	}
	var wss []*domain.Workspace
	if fromServer {
		gg := *g
		if gg.creds == "" {
			gg.creds = cc.AdminCreds()
		}
		if wss, err = readMembers(&gg); err != nil {
			return err
		}
	}
	conf, identities, err := cc.Write(wss, insecureOpen)
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(out, map[string]any{"config": conf, "service_seed": cc.ServiceSeed(),
			"admin_credential": cc.AdminCreds(), "service_key": cc.ServiceKey, "admin_key": cc.AdminKey, "identities": identities})
	}
	fmt.Fprintf(out, "wrote %s (%d identities)\n\n", conf, identities)
	fmt.Fprintf(out, "1. In each nats-server's configuration: `include %s`, with jetstream { sync_interval: always } and http_port: 8222; reload or restart.\n", access.ClusterConfigFile)
	fmt.Fprintf(out, "2. Every replica:  dwr serve --nats URLS --nats-monitor MONITOR_URLS --replicas 3 --nats-creds %s --admin-key %s\n",
		cc.ServiceSeed(), cc.AdminKey)
	fmt.Fprintf(out, "3. Clients:        dwr --server URLS --creds %s ...  (then dwr users add ... for everyone else)\n", cc.AdminCreds())
	fmt.Fprintf(out, "After users change: dwr admin nats-config --dir %s --from-server, copy %s to the servers, reload them.\n", dir, access.ClusterConfigFile)
	return nil
}

// readMembers reads every workspace with its members from the service.
func readMembers(g *globals) ([]*domain.Workspace, error) {
	var wss []*domain.Workspace
	err := g.withClient(func(ctx context.Context, cl *client.Client) error {
		for w, err := range cl.Workspaces(ctx) {
			if err != nil {
				return err
			}
			w.Members = nil // every member, page after page
			for m, err := range cl.In(w.Name).Members(ctx) {
				if err != nil {
					return err
				}
				w.Members = append(w.Members, *m)
			}
			wss = append(wss, w)
		}
		return nil
	})
	return wss, err
}
