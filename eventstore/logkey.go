package eventstore

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// LogKeySize is the size of a log key made by GenerateLogKey, and the least
// NewLogKey accepts: 32 bytes.
const LogKeySize = 32

// macPurpose opens the bytes every record MAC is computed over, so that the
// key authenticates nothing but log records.
const macPurpose = "dwr log record v2\n"

// LogKey is the secret that authenticates the records of a log: every record
// of format 2 carries an HMAC-SHA256 under it. Whoever can publish on the log
// subject but does not hold the key cannot append a record that verifies,
// however well it is chained. Every writer and every reader of one log must
// hold the same key.
//
// A LogKey is safe for concurrent use.
//
// A LogKey may carry retired keys (NewLogKeyRing): the keys the log's
// earlier records were written under, before a rotation. Records are
// written under the current key only; a verifier accepts a record under a
// retired key only where the log had not yet moved past that key (see
// LogVerifier).
type LogKey struct {
	secret []byte
	id     string
	macs   sync.Pool // of hash.Hash (HMAC-SHA256 under secret)
	// retired are the keys the log used before this one, the most recent
	// first.
	retired []*LogKey
}

// GenerateLogKey returns LogKeySize fresh random bytes for NewLogKey.
func GenerateLogKey() ([]byte, error) {
	b := make([]byte, LogKeySize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("eventstore: generate log key: %w", err)
	}
	return b, nil
}

// NewLogKey returns the key with secret (copied). It returns an error if the
// secret is shorter than LogKeySize.
func NewLogKey(secret []byte) (*LogKey, error) {
	if len(secret) < LogKeySize {
		return nil, fmt.Errorf("eventstore: log key of %d bytes, at least %d needed", len(secret), LogKeySize)
	}
	k := &LogKey{secret: append([]byte(nil), secret...)}
	sum := sha256.Sum256(append([]byte("dwr log key id\n"), k.secret...))
	k.id = hex.EncodeToString(sum[:8])
	k.macs.New = func() any { return hmac.New(sha256.New, k.secret) }
	return k, nil
}

// NewLogKeyRing returns the key with secret current, carrying the retired
// keys the log used before it, the most recent first. A retired key with
// the current key's id, or one given twice, counts once. It returns an
// error for a secret shorter than LogKeySize.
func NewLogKeyRing(current []byte, retired ...[]byte) (*LogKey, error) {
	k, err := NewLogKey(current)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{k.id: true}
	for i, secret := range retired {
		r, err := NewLogKey(secret)
		if err != nil {
			return nil, fmt.Errorf("eventstore: retired log key %d: %w", i+1, err)
		}
		if !seen[r.id] {
			seen[r.id] = true
			k.retired = append(k.retired, r)
		}
	}
	return k, nil
}

// rank returns 0 for the current key's id, i for the i-th retired key's
// (the most recent 1), and -1 for an id the key does not know.
func (k *LogKey) rank(id string) int {
	if id == k.id {
		return 0
	}
	for i, r := range k.retired {
		if r.id == id {
			return i + 1
		}
	}
	return -1
}

// byID returns the key of id, current or retired, or nil.
func (k *LogKey) byID(id string) *LogKey {
	switch r := k.rank(id); {
	case r == 0:
		return k
	case r > 0:
		return k.retired[r-1]
	}
	return nil
}

// IDs returns the ids of the current key and of the retired ones, in order,
// for messages.
func (k *LogKey) IDs() []string {
	ids := []string{k.id}
	for _, r := range k.retired {
		ids = append(ids, r.id)
	}
	return ids
}

// ID returns the key's public identifier: 16 hex digits derived from the
// secret (which they do not reveal). Records carry it, so that a record
// written under another key is told apart from a changed one.
func (k *LogKey) ID() string { return k.id }

// sum returns the hex HMAC of the purpose and body.
func (k *LogKey) sum(body []byte) string {
	h := k.macs.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(macPurpose))
	h.Write(body)
	var out [sha256.Size]byte
	s := hex.EncodeToString(h.Sum(out[:0]))
	k.macs.Put(h)
	return s
}

// macSuffix frames a record's MAC: a record of format 2 ends with
// `,"mac":"<64 hex digits>"}`.
const (
	macOpen   = `,"mac":"`
	macHexLen = 2 * sha256.Size
	macSuffix = len(macOpen) + macHexLen + len(`"}`)
)

// errNoMAC reports a record whose bytes do not end with a MAC.
var errNoMAC = errors.New("the record does not end with a mac")

// splitMAC returns the part of rec a MAC covers and the MAC it ends with.
func splitMAC(rec []byte) (body []byte, mac string, err error) {
	if len(rec) < macSuffix+2 {
		return nil, "", errNoMAC
	}
	tail := rec[len(rec)-macSuffix:]
	if string(tail[:len(macOpen)]) != macOpen || string(tail[len(tail)-2:]) != `"}` {
		return nil, "", errNoMAC
	}
	mac = string(tail[len(macOpen) : len(macOpen)+macHexLen])
	for i := 0; i < len(mac); i++ {
		if c := mac[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return nil, "", errNoMAC
		}
	}
	return rec[:len(rec)-macSuffix], mac, nil
}

// authenticUnder reports whether rec, a stored record of format 2, carries
// a valid MAC under the key of id, k's or one it retired.
func (k *LogKey) authenticUnder(id string, rec []byte) bool {
	r := k.byID(id)
	return r != nil && r.Authentic(rec)
}

// Authentic reports whether rec, a stored record of format 2, carries a
// valid MAC under k: its bytes are exactly those a holder of k wrote.
func (k *LogKey) Authentic(rec []byte) bool {
	body, mac, err := splitMAC(rec)
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(k.sum(body)), []byte(mac))
}
