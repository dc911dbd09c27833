package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
)

func adminCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "maintenance: verify the log, rebuild the views, NATS configuration for a cluster"}
	cmd.AddCommand(natsConfigCmd(g))
	var o maintenance
	var keep, accept bool
	rebuild := &cobra.Command{
		Use:   "rebuild --data DIR",
		Short: "rebuild the views from the log (stop `dwr serve` on DIR first)",
		Long: "rebuild verifies the whole log and replays it into fresh views, compares them with the current ones byte for byte, reports the result, " +
			"and puts the rebuilt views in place (the old ones are kept as views.old unless --keep=false). A log that fails verification, or " +
			"that ends before what the current views hold, is refused (exit 6) and the views are left untouched, unless --accept-verified-prefix: " +
			"then the acknowledged commands after the verified prefix are printed as lost and an acceptance record is appended to the log first. " +
			"The log's stream is never created or changed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), func(ctx context.Context, m *handlers.Maintenance) error {
				return rebuildViews(ctx, m, handlers.RebuildOptions{Keep: keep, AcceptVerifiedPrefix: accept, Progress: cmd.ErrOrStderr()}, cmd.OutOrStdout())
			})
		},
	}
	o.flags(rebuild)
	rebuild.Flags().BoolVar(&keep, "keep", true, "keep the old views as views.old")
	rebuild.Flags().BoolVar(&accept, "accept-verified-prefix", false, "if the log fails verification, accept its verified prefix: the commands after it are lost")
	verify := &cobra.Command{
		Use:   "verify --data DIR",
		Short: "verify the whole log: its chain, every record's MAC, its stream's configuration, and the views' checkpoint against it",
		Long: "verify reads every record of the log (stop `dwr serve` on DIR first, or use --nats) and checks that each decodes, is authenticated by the " +
			"log key, takes the next position and carries the previous record's hash; that the log stream is configured as dwr's log must be; and " +
			"that the views' last record is on the log's chain. It prints progress on stderr, then a table (or --json), and exits 6 naming what is wrong. " +
			"It never changes anything.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), func(ctx context.Context, m *handlers.Maintenance) error {
				return verifyLog(ctx, m, g.json, cmd.OutOrStdout(), cmd.ErrOrStderr())
			})
		},
	}
	o.flags(verify)
	cmd.AddCommand(rebuild, verify, rotateMasterKeyCmd(), rotateLogKeyCmd(g))
	return cmd
}

// rotateMasterKeyCmd rewraps the data keys with a new master key.
func rotateMasterKeyCmd() *cobra.Command {
	var o maintenance
	var current, next string
	cmd := &cobra.Command{
		Use:   "rotate-master-key --data DIR --new-key-file FILE [--master-key-file FILE]",
		Short: "wrap every data key again with a new master key, and erase the old wrappings (stop `dwr serve` on DIR first)",
		Long: "rotate-master-key unwraps every data key with the current master key (--master-key-file, default DATA/master.key), wraps it\n" +
			"with the new one (--new-key-file: made, 32 random bytes, mode 0600, when the file does not exist) and erases the old\n" +
			"wrapping. When the current key is DATA/master.key, that file then holds the new key. Start every replica with the new\n" +
			"key; the old one opens nothing any more. Run it again with the same keys if it was cut short.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if next == "" {
				return fail(exitInvalid, "--new-key-file FILE is required: the new master key (made when the file does not exist)")
			}
			return o.run(cmd.Context(), func(ctx context.Context, m *handlers.Maintenance) error {
				return rotateMasterKey(ctx, m, o.DataDir, current, next, cmd.OutOrStdout())
			})
		},
	}
	o.flags(cmd)
	cmd.Flags().StringVar(&current, "master-key-file", os.Getenv("DWR_MASTER_KEY_FILE"), "the current master key (default DATA/master.key)")
	cmd.Flags().StringVar(&next, "new-key-file", "", "the new master key (made when the file does not exist)")
	return cmd
}

// rotateLogKeyCmd replaces the log key, keeping the old one as retired.
func rotateLogKeyCmd(g *globals) *cobra.Command {
	var dataDir, file string
	cmd := &cobra.Command{
		Use:   "rotate-log-key [--data DIR] [--log-key-file FILE]",
		Short: "replace the log key with a new one, keeping the old one among the retired keys beside it",
		Long: "rotate-log-key writes a new log key to --log-key-file (default DATA/log.key) and keeps the old one first in FILE.retired,\n" +
			"the keys the log's earlier records were written under. Start every replica with the new key and its .retired file (copy\n" +
			"both); the writer's next start records the change in its epoch record, and from there a record under a retired key does\n" +
			"not verify: whoever holds an old key can no longer append to the log. Keep the .retired file with the key: the records\n" +
			"before the rotation verify only with it. A rotation cut short can be run again.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			oldID, newID, err := handlers.RotateLogKey(file, dataDir)
			if err != nil {
				return fail(exitInvalid, "%v", err)
			}
			path := file
			if path == "" {
				path = filepath.Join(dataDir, handlers.LogKeyFile)
			}
			if g.json {
				return printJSON(cmd.OutOrStdout(), map[string]string{"file": path, "retired_file": path + handlers.RetiredLogKeysSuffix,
					"old_key_id": oldID, "new_key_id": newID})
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s now holds the log key %s; %s keeps the retired key %s first\n", path, newID, path+handlers.RetiredLogKeysSuffix, oldID)
			fmt.Fprintln(out, "give both files to every replica of this log (--log-key-file), restart them, and back them up")
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data", envOr("DWR_DATA", "dwr-data"), "the data directory of the server")
	logKeyFlag(cmd, &file)
	return cmd
}

func rotateMasterKey(ctx context.Context, m *handlers.Maintenance, dataDir, current, next string, out io.Writer) error {
	old, err := handlers.OpenMasterKey("", current, dataDir, nil)
	if err != nil {
		return handlersError(err)
	}
	key, err := handlers.LoadOrMakeMasterKey(next)
	if err != nil {
		return handlersError(err)
	}
	n, err := m.RotateMasterKey(ctx, "", old, key)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	fmt.Fprintf(out, "rewrapped %d data keys with the master key of %s\n", n, next)
	if current == "" {
		path := filepath.Join(dataDir, handlers.MasterKeyFile)
		if err := handlers.ReplaceKeyFile(path, key); err != nil {
			return fail(exitError, "the data keys are rewrapped, but %s could not be replaced by the new key: %v; start dwr serve with --master-key-file %s", path, err, next)
		}
		fmt.Fprintf(out, "%s now holds the new key\n", path)
	}
	fmt.Fprintln(out, "give the new key to every replica (--master-key-file); the old one opens nothing any more")
	return nil
}

// maintenance is the flags of a command on the log of a stopped service's
// data directory (on an embedded NATS server) or of a cluster (--nats): its
// stream is never created or changed.
type maintenance handlers.MaintenanceConfig

func (o *maintenance) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.DataDir, "data", envOr("DWR_DATA", "dwr-data"), "the data directory of the server")
	natsFlags(cmd, &o.External)
	logKeyFlag(cmd, &o.LogKeyFile)
}

// run opens the log with the log key, runs f on it and closes it.
func (o *maintenance) run(ctx context.Context, f func(context.Context, *handlers.Maintenance) error) error {
	m, err := handlers.OpenMaintenance(ctx, handlers.MaintenanceConfig(*o))
	if err != nil {
		return handlersError(err)
	}
	defer m.Close()
	return f(ctx, m)
}

func rebuildViews(ctx context.Context, m *handlers.Maintenance, o handlers.RebuildOptions, out io.Writer) error {
	r, err := m.Rebuild(ctx, o)
	var refused *handlers.RebuildRefusedError
	var ce *eventstore.StreamConfigError
	switch {
	case errors.As(err, &refused):
		_ = refused.PrintLost(o.Progress) // notes on stderr
		return fail(exitDamaged, "%v\nthe views were left untouched; to give up what follows the verified prefix, run again with --accept-verified-prefix", err)
	case errors.As(err, &ce):
		return fail(exitDamaged, "%v", err)
	case err != nil:
		return fail(exitError, "%v", err)
	}
	return r.Print(out)
}

func verifyLog(ctx context.Context, m *handlers.Maintenance, asJSON bool, out, errw io.Writer) error {
	r, err := m.Verify(ctx, errw)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	if asJSON {
		err = printJSON(out, r)
	} else {
		err = r.Print(out)
	}
	if err != nil {
		return err
	}
	if !r.OK {
		return fail(exitDamaged, "the log fails verification: %s", strings.Join(r.Problems, "; "))
	}
	return nil
}
