package executors_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"os/exec"
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

	// A key file written before names the approver in PEM headers.
	der8, err := x509.MarshalPKCS8PrivateKey(k.Private)
	require.NoError(t, err)
	old := filepath.Join(dir, "old.pem")
	require.NoError(t, os.WriteFile(old, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der8,
		Headers: map[string]string{"Approver": "ada", "Workspace": "shop"}}), 0o600))
	got, err = executors.ReadSigningKey(old)
	require.NoError(t, err)
	require.Equal(t, k, got)
	_, err = executors.ReadSigningKey(pemFile)
	require.ErrorContains(t, err, `holds no PEM "PRIVATE KEY" block`)
}

// A key file is standard PKCS #8: openssl reads it (its public half is the
// one dwr registers), and a key openssl made is read as a signing key.
func TestKeyFilesAreStandardPEM(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed (apt-get install openssl)")
	}
	dir := t.TempDir()
	k, err := executors.NewSigningKey("ada", "shop")
	require.NoError(t, err)
	b, err := k.PEM()
	require.NoError(t, err)
	require.NotContains(t, string(b), "Approver:", "no custom PEM headers")
	file := filepath.Join(dir, "ada.key")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	pubFile := filepath.Join(dir, "ada.pub")
	out, err := exec.Command(openssl, "pkey", "-in", file, "-pubout", "-out", pubFile).CombinedOutput() //nolint:gosec // the test's own files
	require.NoError(t, err, "openssl reads the key file: %s", out)
	pub, err := executors.ReadPublicKey(pubFile)
	require.NoError(t, err)
	require.Equal(t, k.Public(), pub)

	made := filepath.Join(dir, "openssl.key")
	out, err = exec.Command(openssl, "genpkey", "-algorithm", "ed25519", "-out", made).CombinedOutput() //nolint:gosec // the test's own file
	require.NoError(t, err, "%s", out)
	got, err := executors.ReadSigningKey(made)
	require.NoError(t, err)
	require.Empty(t, got.Approver, "an openssl key names no approver")
	require.Len(t, got.Private, ed25519.PrivateKeySize)
}
