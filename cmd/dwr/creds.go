package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors"
	"github.com/dwr-run/dwr/handlers/access"
)

// credsFile returns the credential a client command connects with: --creds,
// else DWR_CREDS, else the admin credential of the local data directory
// ($DWR_DATA or ./dwr-data) when it exists, else none.
func (g *globals) credsFile() string {
	if g.creds != "" {
		return g.creds
	}
	p := filepath.Join(envOr("DWR_DATA", "dwr-data"), access.AdminCredsFile)
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
