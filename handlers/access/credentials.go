package access

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// AdminCredsFile is the admin credential that `dwr serve` creates in its data
// directory on first start (and `dwr admin nats-config` in its directory).
const AdminCredsFile = "admin.creds"

// A credential file is a user nkey seed with comment lines saying whose it
// is: what executors.Credentials and `dwr --creds` read, and `nats --nkey`
// too. Whoever holds it connects as that identity.

// Credential is a fresh identity's key pair, to be added as a member (its
// PublicKey) and written as a credential file (Write).
type Credential struct {
	kp        nkeys.KeyPair
	PublicKey string
}

// NewCredential makes a fresh user key pair.
func NewCredential() (*Credential, error) {
	kp, pub, err := newUser()
	if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	return &Credential{kp: kp, PublicKey: pub}, nil
}

// newUser makes a fresh NATS user key pair and returns it with its public
// key.
func newUser() (nkeys.KeyPair, string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, "", err
	}
	return kp, pub, nil
}

// Write writes the credential to path, mode 0600, with a comment saying
// about whom it is. It refuses to replace an existing file unless force,
// with an error wrapping fs.ErrExist.
func (c *Credential) Write(path, about string, force bool) error {
	seed, err := c.kp.Seed()
	if err != nil {
		return err
	}
	body := fmt.Sprintf("# dwr credential: %s\n# identity %s\n# Keep it secret: whoever holds this file connects as this identity.\n# Use: dwr --creds FILE, DWR_CREDS=FILE, or nats --nkey FILE --inbox-prefix _INBOX.%s\n%s\n",
		about, c.PublicKey, c.PublicKey, seed)
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// CredentialKey returns the public key of the credential file at path. The
// error wraps fs.ErrNotExist when there is no file.
func CredentialKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return "", fmt.Errorf("%s holds no user nkey seed: %w", path, err)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// EnsureCredential returns the public key of the credential file at path,
// first writing a fresh one there, about whom about says, when there is
// none; created tells whether it did.
func EnsureCredential(path, about string) (pub string, created bool, err error) {
	if pub, err = CredentialKey(path); err == nil {
		return pub, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	c, err := NewCredential()
	if err != nil {
		return "", false, err
	}
	if err := c.Write(path, about, false); err != nil {
		return "", false, err
	}
	return c.PublicKey, true, nil
}

// NATSCredentials returns the option that connects to a NATS server you run
// with the credentials file at path: a JWT credential (NATS USER JWT, as
// nsc writes it) or an nkey seed (such as the service's, ServiceSeedFile).
// It returns the read error as it is, or an error naming path when it holds
// neither.
func NATSCredentials(path string) (nats.Option, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.Contains(string(b), "NATS USER JWT") {
		return nats.UserCredentials(path), nil
	}
	nk, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%s: neither a JWT credential nor an nkey seed: %w", path, err)
	}
	return nk, nil
}
