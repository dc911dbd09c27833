package embedded_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/embedded"
)

// pki writes a CA and a certificate it signed for 127.0.0.1 into dir, and
// returns the files.
type pki struct{ ca, cert, key, clientCert, clientKey string }

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dwr test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
		return p
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &k.PublicKey, caKey)
		require.NoError(t, err)
		kb, err := x509.MarshalECPrivateKey(k)
		require.NoError(t, err)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kb)
	}
	p := pki{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.cert, p.key = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// With TLS, clients connect only over TLS to a certificate they trust;
// with a CA too, only with a certificate it signed.
var quiet = slog.New(slog.DiscardHandler)

func TestTLSAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	roots := x509.NewCertPool()
	b, err := os.ReadFile(p.ca)
	require.NoError(t, err)
	require.True(t, roots.AppendCertsFromPEM(b))

	// As dwr serve runs it: the port opens later, with Listen.
	srv, err := embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "tls"), Listen: "127.0.0.1:0", ListenLater: true, Logger: quiet,
		TLS: &embedded.TLSConfig{CertFile: p.cert, KeyFile: p.key}})
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
		TLS: &embedded.TLSConfig{CertFile: p.cert, KeyFile: p.key, CAFile: p.ca}})
	require.NoError(t, err)
	defer mtls.Shutdown()
	_, err = nats.Connect(mtls.ClientURL(), nats.Secure(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		nats.Timeout(2*time.Second))
	require.Error(t, err, "mutual TLS: a client without a certificate is refused")
	cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	require.NoError(t, err)
	nc, err = nats.Connect(mtls.ClientURL(), nats.Secure(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert},
		MinVersion: tls.VersionTLS12}))
	require.NoError(t, err, "mutual TLS: a client with a certificate of the CA connects")
	nc.Close()

	_, err = embedded.Start(embedded.Config{DataDir: filepath.Join(dir, "bad"), TLS: &embedded.TLSConfig{CertFile: p.cert}})
	require.ErrorContains(t, err, "TLS needs both CertFile and KeyFile")
}
