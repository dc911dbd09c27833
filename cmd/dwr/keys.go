package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers"
)

// keyOut is what `dwr keys create|add --json` prints.
type keyOut struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	Workspace string `json:"workspace"`
	File      string `json:"file,omitempty"` // the private key's file (keys create)
	// Credential is the approver's NATS credential (keys create --creds-out).
	Credential string `json:"credential,omitempty"`
	Version    uint64 `json:"version"`
	Duplicate  bool   `json:"duplicate,omitempty"`
}

func keysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "register approvers' signing keys (Ed25519) and list them"}

	var role, out, credsOut string
	var force bool
	create := &cobra.Command{
		Use:   "create NAME --role ROLE --out FILE [--creds-out FILE]",
		Short: "make an Ed25519 key pair for approver NAME: register the public half, write the private half to FILE (mode 0600)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if role == "" || out == "" {
				return fail(exitInvalid, "both --role and --out are required")
			}
			if !force {
				if _, err := os.Lstat(out); err == nil {
					return fail(exitInvalid, "%s already exists: choose another --out, or pass --force to replace it (the key it holds will no longer be usable once replaced)", out)
				}
			}
			key, err := executors.NewSigningKey(args[0], g.workspace)
			if err != nil {
				return fail(exitError, "%s", strings.TrimPrefix(err.Error(), "executors: "))
			}
			data, err := key.PEM()
			if err != nil {
				return fail(exitError, "%s", strings.TrimPrefix(err.Error(), "executors: "))
			}
			// The private half goes to a temporary file beside FILE first, and
			// into place only once the public half is registered: a refused
			// registration leaves nothing behind, and FILE never holds a key
			// the service does not know.
			tmp, err := writeTemp(out, data)
			if err != nil {
				return fail(exitInvalid, "cannot write the key to %s: %v", out, err)
			}
			defer func() { _ = os.Remove(tmp) }() // gone already once moved into place
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			k, err := register(g, cl, args[0], role, key.Public(), "")
			if err != nil {
				return err
			}
			if err := placeFile(tmp, out, force); err != nil {
				return fail(exitError, "the key %s is registered for %s, but writing %s failed: %v\nrun `dwr keys create` again (it replaces the registration)", k.KeyID, k.Name, out, err)
			}
			k.File = out
			if credsOut != "" { // the approver's login: it decides as itself
				if _, _, err := addUser(cl, args[0], domain.RoleApprover, nil, credsOut, force, ""); err != nil {
					return err
				}
				k.Credential = credsOut
			}
			if g.json {
				return printJSON(g.out, k)
			}
			fmt.Fprintf(g.out, "approver %s (role %s) registered in workspace %s with key %s\nprivate key written to %s (mode 0600): keep it secret, it signs decisions (dwr approve --key %s)\n",
				k.Name, k.Role, k.Workspace, k.KeyID, out, out)
			if credsOut != "" {
				fmt.Fprintf(g.out, "user %s (role approver) added; credential written to %s: dwr --creds %s approve ...\n", args[0], credsOut, credsOut)
			}
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "the role that authorizes the approver (required)")
	create.Flags().StringVar(&out, "out", "", "file to write the private key to (required)")
	create.Flags().BoolVar(&force, "force", false, "replace FILE if it exists")
	create.Flags().StringVar(&credsOut, "creds-out", "", "also add NAME as a user with role approver and write its credential here: an approver decides as itself")

	var addRole, pubFile, cmdID string
	add := &cobra.Command{
		Use:   "add NAME --role ROLE --public-key FILE",
		Short: "register an existing Ed25519 public key (PEM \"PUBLIC KEY\", or the base64 of its 32 bytes) for approver NAME",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if addRole == "" || pubFile == "" {
				return fail(exitInvalid, "both --role and --public-key are required")
			}
			pub, err := executors.ReadPublicKey(pubFile)
			if err != nil {
				return fail(exitInvalid, "%s", strings.TrimPrefix(err.Error(), "executors: "))
			}
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			k, err := register(g, cl, args[0], addRole, pub, cmdID)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, k)
			}
			line := fmt.Sprintf("approver %s (role %s) registered in workspace %s with key %s", k.Name, k.Role, k.Workspace, k.KeyID)
			if k.Duplicate {
				line += " (already registered: nothing changed)"
			}
			fmt.Fprintln(g.out, line)
			return nil
		},
	}
	add.Flags().StringVar(&addRole, "role", "", "the role that authorizes the approver (required)")
	add.Flags().StringVar(&pubFile, "public-key", "", "file holding the public key (required)")
	add.Flags().StringVar(&cmdID, "command-id", "", "idempotency key (default: a fresh ULID)")

	var revokeID string
	revoke := &cobra.Command{
		Use: "revoke NAME", Short: "revoke approver NAME's key: its decisions are refused (and recorded as refused) from now on", Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			if _, _, err := cl.command("approver.revoke", domain.RevokeApprover{Name: args[0]}, revokeID); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, map[string]any{"name": args[0], "workspace": g.workspace, "revoked": true})
			}
			fmt.Fprintf(g.out, "approver %s's key revoked in workspace %s\n", args[0], g.workspace)
			return nil
		},
	}
	revoke.Flags().StringVar(&revokeID, "command-id", "", "idempotency key (default: a fresh ULID)")

	list := &cobra.Command{
		Use: "list", Short: "list the workspace's approvers and their keys", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			cl, err := g.connect()
			if err != nil {
				return err
			}
			defer cl.close()
			res, err := cl.query("approver.list", handlers.Query{}, 0)
			if err != nil {
				return err
			}
			var as []domain.Approver
			if err := json.Unmarshal(res, &as); err != nil {
				return err
			}
			if g.json {
				if as == nil {
					as = []domain.Approver{}
				}
				return printJSON(g.out, as)
			}
			rows := make([][]string, len(as))
			for i, a := range as {
				rows[i] = []string{a.Name, a.Role, a.KeyID, ago(a.RegisteredAt)}
			}
			return table(g.out, []string{"NAME", "ROLE", "KEY-ID", "REGISTERED"}, rows)
		},
	}
	cmd.AddCommand(create, add, revoke, list)
	return cmd
}

// register sends approver.register for pub.
func register(g *globals, cl *client, name, role string, pub ed25519.PublicKey, cmdID string) (keyOut, error) {
	b64 := base64.StdEncoding.EncodeToString(pub)
	res, _, err := cl.command("approver.register", domain.RegisterApprover{Name: name, Role: role, PublicKey: b64}, cmdID)
	if err != nil {
		return keyOut{}, err
	}
	var r domain.Reply
	if err := json.Unmarshal(res, &r); err != nil {
		return keyOut{}, err
	}
	return keyOut{Name: name, Role: role, KeyID: executors.KeyID(pub), PublicKey: b64, Workspace: g.workspace,
		Version: r.Version, Duplicate: r.Duplicate}, nil
}

// writeTemp writes data to a new file (mode 0600) in the directory of path
// and returns its name.
func writeTemp(path string, data []byte) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	if err := f.Chmod(0o600); err == nil {
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			return name, nil
		}
	} else {
		_ = f.Close() // already failing
	}
	_ = os.Remove(name)
	return "", err
}

// placeFile moves tmp to path; without force it never replaces a file that
// appeared at path meanwhile.
func placeFile(tmp, path string, force bool) error {
	if force {
		return os.Rename(tmp, path)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s appeared meanwhile; not replaced", path)
		}
		if _, serr := os.Lstat(path); serr == nil {
			return fmt.Errorf("%s appeared meanwhile; not replaced", path)
		}
		return os.Rename(tmp, path) // a file system without hard links
	}
	return os.Remove(tmp)
}
