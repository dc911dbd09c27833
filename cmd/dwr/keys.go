package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// Key files: a PEM "PRIVATE KEY" block (PKCS #8 Ed25519) whose headers name
// the approver and the workspace the key was registered in, so that
// `dwr approve` knows who signs.
const (
	pemPrivateKey      = "PRIVATE KEY"
	pemPublicKey       = "PUBLIC KEY"
	pemHeaderApprover  = "Approver"
	pemHeaderWorkspace = "Workspace"
	maxKeyFile         = 64 << 10
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
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return fail(exitError, "generating a key: %v", err)
			}
			der, err := x509.MarshalPKCS8PrivateKey(priv)
			if err != nil {
				return fail(exitError, "encoding the key: %v", err)
			}
			data := pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der,
				Headers: map[string]string{pemHeaderApprover: args[0], pemHeaderWorkspace: g.workspace}})
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
			k, err := register(g, cl, args[0], role, pub, "")
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
			pub, err := readPublicKey(pubFile)
			if err != nil {
				return err
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
			res, err := cl.query("approver.list", schemas.Query{}, 0)
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
	return keyOut{Name: name, Role: role, KeyID: domain.KeyID(pub), PublicKey: b64, Workspace: g.workspace,
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

// readPublicKey reads an Ed25519 public key: a PEM "PUBLIC KEY" block
// (PKIX), or the standard base64 of the key's 32 bytes.
func readPublicKey(file string) (ed25519.PublicKey, error) {
	b, err := readFile(file)
	if err != nil {
		return nil, fail(exitInvalid, "public key %s: %v", file, err)
	}
	if block, _ := pem.Decode(b); block != nil {
		switch block.Type {
		case pemPublicKey:
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fail(exitInvalid, "public key %s: the PEM PUBLIC KEY block does not parse: %v", file, err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fail(exitInvalid, "public key %s is a %T, not an Ed25519 key: approvals are signed with Ed25519 (openssl genpkey -algorithm ed25519, or dwr keys create)", file, k)
			}
			return pub, nil
		case pemPrivateKey:
			return nil, fail(exitInvalid, "%s holds a PRIVATE key: register only the public half (openssl pkey -in %s -pubout -out pub.pem), and keep the private one to yourself", file, file)
		default:
			return nil, fail(exitInvalid, "public key %s holds a PEM %q block: give a PEM \"PUBLIC KEY\" block (PKIX Ed25519) or the base64 of the key's 32 bytes", file, block.Type)
		}
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fail(exitInvalid, "public key %s holds neither a PEM \"PUBLIC KEY\" block (PKIX Ed25519) nor the standard base64 of a %d-byte Ed25519 key: export one with `openssl pkey -in key.pem -pubout`, or make a pair with `dwr keys create`", file, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// signingKey is a private key read from a key file, with the approver and
// workspace its headers name.
type signingKey struct {
	priv      ed25519.PrivateKey
	approver  string
	workspace string
}

// readSigningKey reads a key file as `dwr keys create` writes it.
func readSigningKey(file string) (signingKey, error) {
	b, err := readFile(file)
	if err != nil {
		return signingKey{}, fail(exitInvalid, "key file %s: %v", file, err)
	}
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return signingKey{}, fail(exitInvalid, "key file %s holds no PEM \"PRIVATE KEY\" block: make one with `dwr keys create NAME --role ROLE --out FILE`", file)
		}
		if block.Type != pemPrivateKey {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return signingKey{}, fail(exitInvalid, "key file %s: the PRIVATE KEY block does not parse (PKCS #8): %v", file, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return signingKey{}, fail(exitInvalid, "key file %s holds a %T, not an Ed25519 key", file, k)
		}
		return signingKey{priv: priv, approver: block.Headers[pemHeaderApprover], workspace: block.Headers[pemHeaderWorkspace]}, nil
	}
}

func readFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	b, err := readLimited(f, maxKeyFile)
	_ = f.Close() // read-only: nothing to lose
	return b, err
}
