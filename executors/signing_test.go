package executors_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors"
)

// A key file round-trips with the approver and workspace it names, and a
// decision signed with it is the one the service verifies.
func TestSigningKeyFileAndDecision(t *testing.T) {
	dir := t.TempDir()
	k, err := executors.NewSigningKey("ada", "shop")
	require.NoError(t, err)
	b, err := k.PEM()
	require.NoError(t, err)
	file := filepath.Join(dir, "ada.pem")
	require.NoError(t, os.WriteFile(file, append([]byte("# a comment before the block\n"), b...), 0o600))
	got, err := executors.ReadSigningKey(file)
	require.NoError(t, err)
	require.Equal(t, k, got)

	sig := executors.SignDecision(k.Private, "T-1", "approve", "sha256:aa")
	require.Equal(t, domain.SignDecision(k.Private, "T-1", "approve", "sha256:aa"), sig, "the service's message")
	require.Equal(t, domain.KeyID(k.Public()), executors.KeyID(k.Public()))

	der, err := x509.MarshalPKIXPublicKey(k.Public())
	require.NoError(t, err)
	pemFile, b64File := filepath.Join(dir, "pub.pem"), filepath.Join(dir, "pub.b64")
	require.NoError(t, os.WriteFile(pemFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(b64File, []byte(base64.StdEncoding.EncodeToString(k.Public())+"\n"), 0o600))
	for _, f := range []string{pemFile, b64File} {
		pub, err := executors.ReadPublicKey(f)
		require.NoError(t, err, f)
		require.Equal(t, ed25519.PublicKey(k.Public()), pub)
	}
	_, err = executors.ReadPublicKey(file)
	require.ErrorContains(t, err, "holds a PRIVATE key")
	_, err = executors.ReadSigningKey(pemFile)
	require.ErrorContains(t, err, `holds no PEM "PRIVATE KEY" block`)
}
