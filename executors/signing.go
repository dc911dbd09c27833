package executors

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// An approver decides an approval by signing it with an Ed25519 key whose
// public half is registered for them (approver.register); the service
// checks the signature of every decision (approval.decide).

// Key files: a standard PEM "PRIVATE KEY" block (PKCS #8 Ed25519, as
// openssl and WebCrypto read it), after comment lines that name the approver
// and the workspace the key was registered in ("# approver: ada"), so that
// whoever signs with it (`dwr approve`) knows who signs. Files written
// before named them in PEM headers, which are still read.
const (
	pemPrivateKey      = "PRIVATE KEY"
	pemPublicKey       = "PUBLIC KEY"
	pemHeaderApprover  = "Approver"
	pemHeaderWorkspace = "Workspace"
	commentApprover    = "# approver: "
	commentWorkspace   = "# workspace: "
	maxKeyFile         = 64 << 10
)

// DecisionPurpose opens every signed decision, so that a signature made for
// dwr approvals cannot be taken for anything else, nor one made elsewhere
// for a decision.
const DecisionPurpose = "dwr approval decision v1"

// DecisionMessage returns the bytes an approver signs to decide an approval
// (the wire contract): the purpose, the approval id, the response and the
// action digest, one per line. A signature over them decides only that
// approval, with that response, of exactly that action.
func DecisionMessage(approvalID, response, actionDigest string) []byte {
	return []byte(DecisionPurpose + "\n" + approvalID + "\n" + response + "\n" + actionDigest)
}

// SignDecision signs a decision with an approver's private key and returns
// the signature as standard base64, as the approval.decide command carries
// it.
func SignDecision(key ed25519.PrivateKey, approvalID, response, actionDigest string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key, DecisionMessage(approvalID, response, actionDigest)))
}

// KeyID returns the id the service gives an approver's public key: the hex
// of the first 8 bytes of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:8])
}

// SigningKey is an approver's private key, with the approver and the
// workspace it was registered in (empty when its file does not say).
type SigningKey struct {
	Private   ed25519.PrivateKey
	Approver  string
	Workspace string
}

// NewSigningKey makes a fresh key pair for approver in workspace.
func NewSigningKey(approver, workspace string) (*SigningKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("executors: generating a key: %w", err)
	}
	return &SigningKey{Private: priv, Approver: approver, Workspace: workspace}, nil
}

// Public returns the key's public half, the one to register.
func (k *SigningKey) Public() ed25519.PublicKey { return k.Private.Public().(ed25519.PublicKey) }

// PEM returns the key as ReadSigningKey reads it: comment lines naming the
// approver and the workspace, then a standard PEM "PRIVATE KEY" block
// (PKCS #8), which openssl (`openssl pkey -in FILE -pubout`) and a
// browser's WebCrypto read as they are.
func (k *SigningKey) PEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, fmt.Errorf("executors: encoding the key: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("# dwr approver key: keep it secret (mode 0600)\n")
	if k.Approver != "" {
		b.WriteString(commentApprover + k.Approver + "\n")
	}
	if k.Workspace != "" {
		b.WriteString(commentWorkspace + k.Workspace + "\n")
	}
	if err := pem.Encode(&b, &pem.Block{Type: pemPrivateKey, Bytes: der}); err != nil {
		return nil, fmt.Errorf("executors: encoding the key: %w", err)
	}
	return b.Bytes(), nil
}

// PendingKeyFile is a key written beside its file, to be put in place once
// its public half is registered: a refused registration leaves nothing
// behind, and the file never holds a key the service does not know.
type PendingKeyFile struct {
	tmp, path string
}

// WritePending writes the key (as PEM does) to a new file (mode 0600) in
// the directory of path, for Place to move to path. It returns the error of
// the encoding or of the write.
func (k *SigningKey) WritePending(path string) (*PendingKeyFile, error) {
	data, err := k.PEM()
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	p := &PendingKeyFile{tmp: f.Name(), path: path}
	if err := f.Chmod(0o600); err == nil {
		_, err = f.Write(data)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			return p, nil
		}
	} else {
		_ = f.Close() // already failing
	}
	p.Discard()
	return nil, err
}

// Place moves the key to its file; without force it never replaces a file
// that appeared there meanwhile.
func (p *PendingKeyFile) Place(force bool) error {
	if force {
		return os.Rename(p.tmp, p.path)
	}
	if err := os.Link(p.tmp, p.path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s appeared meanwhile; not replaced", p.path)
		}
		if _, serr := os.Lstat(p.path); serr == nil {
			return fmt.Errorf("%s appeared meanwhile; not replaced", p.path)
		}
		return os.Rename(p.tmp, p.path) // a file system without hard links
	}
	return os.Remove(p.tmp)
}

// Discard removes the key's temporary file, if it is still there.
func (p *PendingKeyFile) Discard() { _ = os.Remove(p.tmp) }

// ReadSigningKey reads a key file as PEM writes it (the first PEM "PRIVATE
// KEY" block of the file, PKCS #8 Ed25519, with the approver and workspace
// its comment lines or PEM headers name), or any PKCS #8 Ed25519 key file
// (openssl genpkey -algorithm ed25519), which names neither. Its errors say
// what the file holds instead.
func ReadSigningKey(file string) (*SigningKey, error) {
	b, err := readKeyFile(file)
	if err != nil {
		return nil, fmt.Errorf("executors: key file %s: %v", file, err)
	}
	var approver, workspace string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "-----BEGIN") {
			break
		}
		if v, ok := strings.CutPrefix(line, strings.TrimSpace(commentApprover)); ok {
			approver = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, strings.TrimSpace(commentWorkspace)); ok {
			workspace = strings.TrimSpace(v)
		}
	}
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("executors: key file %s holds no PEM \"PRIVATE KEY\" block: make one with `dwr keys create NAME --role ROLE --out FILE`", file)
		}
		if block.Type != pemPrivateKey {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("executors: key file %s: the PRIVATE KEY block does not parse (PKCS #8): %v", file, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("executors: key file %s holds a %T, not an Ed25519 key", file, k)
		}
		if v := block.Headers[pemHeaderApprover]; v != "" { // a file written before the comments
			approver = v
		}
		if v := block.Headers[pemHeaderWorkspace]; v != "" {
			workspace = v
		}
		return &SigningKey{Private: priv, Approver: approver, Workspace: workspace}, nil
	}
}

// ReadPublicKey reads an Ed25519 public key: a PEM "PUBLIC KEY" block
// (PKIX), or the standard base64 of the key's 32 bytes. Its errors say what
// the file holds instead (a private key, another kind of key).
func ReadPublicKey(file string) (ed25519.PublicKey, error) {
	b, err := readKeyFile(file)
	if err != nil {
		return nil, fmt.Errorf("executors: public key %s: %v", file, err)
	}
	if block, _ := pem.Decode(b); block != nil {
		switch block.Type {
		case pemPublicKey:
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("executors: public key %s: the PEM PUBLIC KEY block does not parse: %v", file, err)
			}
			pub, ok := k.(ed25519.PublicKey)
			if !ok {
				return nil, fmt.Errorf("executors: public key %s is a %T, not an Ed25519 key: approvals are signed with Ed25519 (openssl genpkey -algorithm ed25519, or dwr keys create)", file, k)
			}
			return pub, nil
		case pemPrivateKey:
			return nil, fmt.Errorf("executors: %s holds a PRIVATE key: register only the public half (openssl pkey -in %s -pubout -out pub.pem), and keep the private one to yourself", file, file)
		default:
			return nil, fmt.Errorf("executors: public key %s holds a PEM %q block: give a PEM \"PUBLIC KEY\" block (PKIX Ed25519) or the base64 of the key's 32 bytes", file, block.Type)
		}
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("executors: public key %s holds neither a PEM \"PUBLIC KEY\" block (PKIX Ed25519) nor the standard base64 of a %d-byte Ed25519 key: export one with `openssl pkey -in key.pem -pubout`, or make a pair with `dwr keys create`", file, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// readKeyFile reads a key file of at most maxKeyFile bytes.
func readKeyFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err == nil && len(b) > maxKeyFile {
		err = fmt.Errorf("larger than %d bytes", maxKeyFile)
	}
	return b, err
}
