package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// keyOut is what `dwr keys create|add --json` prints: the registration,
// and what keys create wrote.
type keyOut struct {
	executors.KeyRegistration
	File string `json:"file,omitempty"` // the private key's file (keys create)
	// Credential is the approver's NATS credential (keys create --creds-out).
	Credential string `json:"credential,omitempty"`
}

func keysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "register approvers' signing keys (Ed25519) and list them"}
	cmd.AddCommand(keysCreateCmd(g), keysAddCmd(g), keysRevokeCmd(g), keysListCmd(g))
	return cmd
}

// keyCreation is what `dwr keys create` makes.
type keyCreation struct {
	name, role, out, credsOut string
	force                     bool
}

func keysCreateCmd(g *globals) *cobra.Command {
	var o keyCreation
	create := &cobra.Command{
		Use:   "create NAME --role ROLE --out FILE [--creds-out FILE]",
		Short: "make an Ed25519 key pair for approver NAME: register the public half, write the private half to FILE (mode 0600)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			o.name = args[0]
			k, err := o.create(g)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(g.out, k)
			}
			fmt.Fprintf(g.out, "approver %s (role %s) registered in workspace %s with key %s\nprivate key written to %s (mode 0600): keep it secret, it signs decisions (dwr approve --key %s)\n",
				k.Name, k.Role, k.Workspace, k.KeyID, o.out, o.out)
			if o.credsOut != "" {
				fmt.Fprintf(g.out, "user %s (role approver) added; credential written to %s: dwr --creds %s approve ...\n", o.name, o.credsOut, o.credsOut)
			}
			return nil
		},
	}
	create.Flags().StringVar(&o.role, "role", "", "the role that authorizes the approver (required)")
	create.Flags().StringVar(&o.out, "out", "", "file to write the private key to (required)")
	create.Flags().BoolVar(&o.force, "force", false, "replace FILE if it exists")
	create.Flags().StringVar(&o.credsOut, "creds-out", "", "also add NAME as a user with role approver and write its credential here: an approver decides as itself")
	return create
}

// create makes the key pair, registers its public half and writes its
// private half (executors.PrepareKey, then NewKey.Register), and adds the approver's credential
// with --creds-out.
func (o keyCreation) create(g *globals) (keyOut, error) {
	if o.role == "" || o.out == "" {
		return keyOut{}, fail(exitInvalid, "both --role and --out are required")
	}
	// The file first, without the network: what is wrong with it shows
	// before anything is registered.
	nk, err := executors.PrepareKey(o.name, g.workspace, o.out, o.force)
	var kf *executors.KeyFileError
	switch {
	case errors.As(err, &kf) && errors.Is(err, fs.ErrExist):
		return keyOut{}, fail(exitInvalid, "%s already exists: choose another --out, or pass --force to replace it (the key it holds will no longer be usable once replaced)", o.out)
	case errors.As(err, &kf):
		return keyOut{}, fail(exitInvalid, "cannot write the key to %s: %s", o.out, kf.Err)
	case err != nil:
		return keyOut{}, err
	}
	defer nk.Discard()
	var k keyOut
	err = g.withClient(func(ctx context.Context, cl *client.Client) error {
		reg, err := nk.Register(ctx, cl, o.role)
		switch {
		case errors.As(err, &kf):
			return fail(exitError, "the key %s is registered for %s, but writing %s failed: %v\nrun `dwr keys create` again (it replaces the registration)", reg.KeyID, reg.Name, o.out, kf.Err)
		case err != nil:
			return err
		}
		k = keyOut{KeyRegistration: *reg}
		k.File = o.out
		if o.credsOut != "" { // the approver's login: it decides as itself
			if _, _, err := addUser(ctx, cl, domain.AddMember{Name: o.name, Role: domain.RoleApprover}, o.credsOut, o.force, ""); err != nil {
				return err
			}
			k.Credential = o.credsOut
		}
		return nil
	})
	return k, err
}

func keysAddCmd(g *globals) *cobra.Command {
	var role, pubFile, cmdID string
	add := &cobra.Command{
		Use:   "add NAME --role ROLE --public-key FILE",
		Short: "register an existing Ed25519 public key (PEM \"PUBLIC KEY\", or the base64 of its 32 bytes) for approver NAME",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if role == "" || pubFile == "" {
				return fail(exitInvalid, "both --role and --public-key are required")
			}
			pub, err := executors.ReadPublicKey(pubFile)
			if err != nil {
				return fail(exitInvalid, "%s", strings.TrimPrefix(err.Error(), "executors: "))
			}
			return g.withClient(func(ctx context.Context, cl *client.Client) error {
				reg, err := executors.RegisterKey(ctx, cl, args[0], role, pub, client.CommandID(cmdID))
				if err != nil {
					return err
				}
				k := keyOut{KeyRegistration: *reg}
				if g.json {
					return printJSON(g.out, k)
				}
				line := fmt.Sprintf("approver %s (role %s) registered in workspace %s with key %s", k.Name, k.Role, k.Workspace, k.KeyID)
				if k.Duplicate {
					line += " (already registered: nothing changed)"
				}
				fmt.Fprintln(g.out, line)
				return nil
			})
		},
	}
	add.Flags().StringVar(&role, "role", "", "the role that authorizes the approver (required)")
	add.Flags().StringVar(&pubFile, "public-key", "", "file holding the public key (required)")
	commandIDFlag(add, &cmdID)
	return add
}

func keysRevokeCmd(g *globals) *cobra.Command {
	return revokeCmd(g, "revoke NAME", "revoke approver NAME's key: its decisions are refused (and recorded as refused) from now on",
		(*client.Client).RevokeApprover, "approver %s's key revoked in workspace %s\n")
}

func keysListCmd(g *globals) *cobra.Command {
	return listCmd(g, &cobra.Command{Use: "list", Short: "list the workspace's approvers and their keys", Args: cobra.NoArgs},
		nil, "approvers", nil, func(ctx context.Context, cl *client.Client, _ []string, opts ...client.CallOption) iter.Seq2[*schemas.Approver, error] {
			return cl.Approvers(ctx, opts...)
		}, columns([]string{"NAME", "ROLE", "KEY-ID", "REGISTERED"}, func(a schemas.Approver) []string {
			return []string{a.Name, a.Role, a.KeyID, ago(a.RegisteredAt)}
		}))
}
