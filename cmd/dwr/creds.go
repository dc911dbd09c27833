package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/dwr-run/dwr/executors"
)

// adminCredsFile is the admin credential `dwr serve` creates in its data
// directory on first start.
const adminCredsFile = "admin.creds"

// writeCreds writes a user nkey seed as a dwr credential file, mode 0600. It
// refuses to replace an existing file unless force.
func writeCreds(path string, kp nkeys.KeyPair, about string, force bool) error {
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	pub, _ := kp.PublicKey()
	body := fmt.Sprintf("# dwr credential: %s\n# identity %s\n# Keep it secret: whoever holds this file connects as this identity.\n# Use: dwr --creds FILE, DWR_CREDS=FILE, or nats --nkey FILE --inbox-prefix _INBOX.%s\n%s\n",
		about, pub, pub, seed)
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fail(exitConflict, "%s exists: choose another --out, or --force to replace it", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// readCredsKey returns the public key of a credential file.
func readCredsKey(path string) (string, error) {
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

// ensureAdminCreds returns the admin credential of data directory data,
// creating it on first start; created tells whether it did.
func ensureAdminCreds(data string) (path, pub string, created bool, err error) {
	path = filepath.Join(data, adminCredsFile)
	if pub, err = readCredsKey(path); err == nil {
		return path, pub, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", false, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", false, err
	}
	if err := writeCreds(path, kp, "admin of every workspace, created by dwr serve", false); err != nil {
		return "", "", false, err
	}
	pub, err = kp.PublicKey()
	return path, pub, true, err
}

// credsFile returns the credential a client command connects with: --creds,
// else DWR_CREDS, else the admin credential of the local data directory
// ($DWR_DATA or ./dwr-data) when it exists, else none.
func (g *globals) credsFile() string {
	if g.creds != "" {
		return g.creds
	}
	p := filepath.Join(envOr("DWR_DATA", "dwr-data"), adminCredsFile)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// natsAuth returns the connect options of a credential file and TLS files;
// empty arguments add nothing.
func natsAuth(creds, caFile, certFile, keyFile string) ([]nats.Option, error) {
	var opts []nats.Option
	if creds != "" {
		o, err := executors.Credentials(creds)
		if err != nil {
			return nil, fail(exitInvalid, "--creds: %v", strings.TrimPrefix(err.Error(), "executors: "))
		}
		opts = append(opts, o...)
	}
	if caFile != "" || certFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return nil, fail(exitInvalid, "--tls-ca: %v", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fail(exitInvalid, "--tls-ca %s holds no PEM certificate", caFile)
			}
		}
		if certFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fail(exitInvalid, "--tls-cert/--tls-key: %v", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}
