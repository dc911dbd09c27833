package executors

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/schemas"
)

// KeyRegistration is an approver's key as registered: its name, role and
// key, the workspace, and the registration's version.
type KeyRegistration struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"` // standard base64 of the 32-byte key
	Workspace string `json:"workspace"`
	Version   uint64 `json:"version"`
	Duplicate bool   `json:"duplicate,omitempty"` // the same key was registered already: nothing changed
}

// RegisterKey registers pub as approver name's key, authorized by role, in
// c's workspace (approver.register, with opts). It returns the registration,
// or the service's refusal as c returns it.
func RegisterKey(ctx context.Context, c *client.Client, name, role string, pub ed25519.PublicKey, opts ...client.CallOption) (*KeyRegistration, error) {
	b64 := base64.StdEncoding.EncodeToString(pub)
	r, err := c.RegisterApprover(ctx, schemas.RegisterApprover{Name: name, Role: role, PublicKey: b64}, opts...)
	if err != nil {
		return nil, err
	}
	return &KeyRegistration{Name: name, Role: role, KeyID: KeyID(pub), PublicKey: b64, Workspace: c.Workspace(),
		Version: r.Version, Duplicate: r.Duplicate}, nil
}

// KeyFileError is CreateKey's failure to write the private key's file:
// before the key was registered (Registered false: nothing changed), or
// after (Registered true: the registration stands, but its private half is
// lost; create the key again, which replaces the registration).
type KeyFileError struct {
	File       string
	Registered bool
	Err        error
}

// Error names the file and what went wrong.
func (e *KeyFileError) Error() string {
	return fmt.Sprintf("executors: key file %s: %v", e.File, e.Err)
}

// Unwrap returns the file system's error.
func (e *KeyFileError) Unwrap() error { return e.Err }

// CreateKey makes an Ed25519 key pair for approver name in c's workspace,
// registers its public half with role (RegisterKey, with opts) and then
// writes the private half to file (mode 0600, as ReadSigningKey reads it):
// PrepareKey, then NewKey.Register.
//
// It returns the key and its registration, or the error of making the key,
// the registration's refusal as c returns it, or a *KeyFileError (with the
// registration when Registered).
func CreateKey(ctx context.Context, c *client.Client, name, role, file string, force bool,
	opts ...client.CallOption) (*SigningKey, *KeyRegistration, error) {
	nk, err := PrepareKey(name, c.Workspace(), file, force)
	if err != nil {
		return nil, nil, err
	}
	defer nk.Discard()
	reg, err := nk.Register(ctx, c, role, opts...)
	if err != nil {
		return nil, reg, err
	}
	return nk.Key, reg, nil
}

// NewKey is an approver's key pair made, with its private half written
// beside its file but not yet in place: Register puts it there once the
// public half is registered, Discard removes it otherwise.
type NewKey struct {
	Key     *SigningKey
	file    string
	force   bool
	pending *PendingKeyFile
}

// PrepareKey makes an Ed25519 key pair for approver name in workspace and
// writes its private half beside file, without the network: what can be
// wrong with the file shows before anything is registered. An existing file
// is replaced only with force (without, it is a *KeyFileError wrapping
// fs.ErrExist); a file that cannot be written is a *KeyFileError too.
func PrepareKey(name, workspace, file string, force bool) (*NewKey, error) {
	if !force {
		if _, err := os.Lstat(file); err == nil {
			return nil, &KeyFileError{File: file, Err: fs.ErrExist}
		}
	}
	key, err := NewSigningKey(name, workspace)
	if err != nil {
		return nil, err
	}
	pending, err := key.WritePending(file)
	if err != nil {
		return nil, &KeyFileError{File: file, Err: err}
	}
	return &NewKey{Key: key, file: file, force: force, pending: pending}, nil
}

// Register registers the key's public half with role in c's workspace
// (RegisterKey, with opts), then puts its private half in place. A file
// that cannot be placed is a *KeyFileError with Registered set, returned
// with the registration.
func (nk *NewKey) Register(ctx context.Context, c *client.Client, role string, opts ...client.CallOption) (*KeyRegistration, error) {
	reg, err := RegisterKey(ctx, c, nk.Key.Approver, role, nk.Key.Public(), opts...)
	if err != nil {
		return nil, err
	}
	if err := nk.pending.Place(nk.force); err != nil {
		return reg, &KeyFileError{File: nk.file, Registered: true, Err: err}
	}
	return reg, nil
}

// Discard removes the private half if it was not put in place.
func (nk *NewKey) Discard() { nk.pending.Discard() }
