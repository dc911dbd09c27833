package embedded_test

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/handlers/servicetest/pki"
)

// With TLS, clients connect only over TLS to a certificate they trust;
// with a CA too, only with a certificate it signed.
var quiet = slog.New(slog.DiscardHandler)

func TestTLSAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := pki.New(t, dir)
	roots := x509.NewCertPool()
	b, err := os.ReadFile(p.CA)
	require.NoError(t, err)
	require.True(t, roots.AppendCertsFromPEM(b))

	// As dwr serve runs it: the port opens later, with Listen.
	srv, err := embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "tls"), Listen: "127.0.0.1:0", ListenLater: true, Logger: quiet,
		TLS: &embedded.TLSConfig{CertFile: p.Cert, KeyFile: p.Key}})
	require.NoError(t, err)
	defer srv.Shutdown()
	require.NoError(t, srv.Listen())
	url := srv.ClientURL()
	_, err = nats.Connect(url, nats.Timeout(2*time.Second))
	require.Error(t, err, "a client without TLS is refused")
	nc, err := nats.Connect(url, nats.Secure(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
	require.NoError(t, err, "a client that trusts the CA connects")
	nc.Close()
	_, err = nats.Connect(url, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12}), nats.Timeout(2*time.Second))
	require.Error(t, err, "a client that does not trust the server's certificate does not connect")

	mtls, err := embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "mtls"), Listen: "127.0.0.1:0", Logger: quiet,
		TLS: &embedded.TLSConfig{CertFile: p.Cert, KeyFile: p.Key, CAFile: p.CA}})
	require.NoError(t, err)
	defer mtls.Shutdown()
	_, err = nats.Connect(mtls.ClientURL(), nats.Secure(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		nats.Timeout(2*time.Second))
	require.Error(t, err, "mutual TLS: a client without a certificate is refused")
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	require.NoError(t, err)
	nc, err = nats.Connect(mtls.ClientURL(), nats.Secure(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert},
		MinVersion: tls.VersionTLS12}))
	require.NoError(t, err, "mutual TLS: a client with a certificate of the CA connects")
	nc.Close()

	_, err = embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "bad"), TLS: &embedded.TLSConfig{CertFile: p.Cert}})
	require.ErrorContains(t, err, "TLS needs both CertFile and KeyFile")
}
