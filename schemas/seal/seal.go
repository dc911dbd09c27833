// Package seal is the sealed-value format of the wire contract
// (schemas.SealedPrefix) and its cryptography: a data key seals a payload
// in a scope of a workspace, and opens what it sealed. The service seals
// with the keys of its keyring (eventstore); an executor opens the work
// items of its queue with the queue key the service derives for it
// (QueueKey) — both with this one implementation.
package seal

import (
	"bytes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/dwr-run/dwr/schemas"
)

// DataKeyBytes is the size of a data key.
const DataKeyBytes = 32

// Scopes of data keys: a workspace's own, or a goal's (its envelope says
// privacy key goal), or a queue's for a day (the work items of the queue,
// which its executors open themselves: QueueKey).
const ScopeWorkspace = "w"

// GoalScope returns the scope of goal id's own data key.
func GoalScope(id string) string { return "g." + id }

// queueScopePrefix begins the scope of a queue key.
const queueScopePrefix = "q."

// QueueScope returns the scope of the queue keys of epoch (a day:
// QueueEpoch). The queue is not in the scope: it is the work item's.
func QueueScope(epoch int64) string { return queueScopePrefix + strconv.FormatInt(epoch, 10) }

// QueueEpoch returns the epoch of the queue keys at t: the days since the
// Unix epoch, UTC. A queue key opens the items sealed on its day only.
func QueueEpoch(t time.Time) int64 { return t.Unix() / 86400 }

// ParseQueueScope returns the epoch a queue key's scope names, and whether
// scope is one.
func ParseQueueScope(scope string) (int64, bool) {
	if len(scope) <= len(queueScopePrefix) || scope[:len(queueScopePrefix)] != queueScopePrefix {
		return 0, false
	}
	n, err := strconv.ParseInt(scope[len(queueScopePrefix):], 10, 64)
	return n, err == nil && n >= 0 && QueueScope(n) == scope
}

// ErrShredded is the error of a data key that was shredded: what it sealed
// can never be read again.
var ErrShredded = errors.New("seal: the data key was shredded")

// DataKey seals and opens payloads (schemas.SealedPrefix): XChaCha20-Poly1305
// with a synthetic nonce, the HMAC-SHA-256 of the associated data and the
// plaintext under a key of its own. Sealing is deterministic — the same
// payload in the same scope seals to the same value — so that the domain
// compares sealed payloads as it compares plaintext ones (a revised plan
// keeps a task whose input is unchanged); equal payloads are the only thing
// it shows.
type DataKey struct {
	aead   cipher.AEAD
	mac    []byte
	derive []byte // the key QueueKey derives queue keys with
}

// NewDataKey returns the data key of the 32 bytes raw.
func NewDataKey(raw []byte) (*DataKey, error) {
	if len(raw) != DataKeyBytes {
		return nil, fmt.Errorf("seal: a data key has %d bytes, not %d", DataKeyBytes, len(raw))
	}
	enc, err := hkdf.Key(sha256.New, raw, nil, "dwr seal 1 encrypt", chacha20poly1305.KeySize)
	if err != nil {
		return nil, err
	}
	mac, err := hkdf.Key(sha256.New, raw, nil, "dwr seal 1 nonce", 32)
	if err != nil {
		return nil, err
	}
	derive, err := hkdf.Key(sha256.New, raw, nil, "dwr seal 1 derive", 32)
	if err != nil {
		return nil, err
	}
	aead, err := chacha20poly1305.NewX(enc)
	if err != nil {
		return nil, err
	}
	return &DataKey{aead: aead, mac: mac, derive: derive}, nil
}

// aad binds a sealed value to its workspace and scope: it opens nowhere
// else.
func aad(ws, scope string) []byte { return []byte("dwr\x00" + ws + "\x00" + scope) }

// Seal returns payload, a JSON value, sealed in scope of workspace ws: a
// JSON string as schemas.SealedPrefix says. A null or empty payload, or
// one sealed already, is returned as it is.
func (k *DataKey) Seal(ws, scope string, payload json.RawMessage) json.RawMessage {
	if len(payload) == 0 || bytes.Equal(payload, []byte("null")) || schemas.IsSealed(payload) {
		return payload
	}
	sealed := k.SealBytes(ws, scope, payload)
	out := make([]byte, 0, len(schemas.SealedPrefix)+len(scope)+base64.RawURLEncoding.EncodedLen(len(sealed))+3)
	out = append(out, '"')
	out = append(out, schemas.SealedPrefix...)
	out = append(out, scope...)
	out = append(out, ':')
	out = base64.RawURLEncoding.AppendEncode(out, sealed)
	return append(out, '"')
}

// SealBytes returns b sealed in scope of workspace ws, in binary: the
// nonce, then the ciphertext and its tag (an artifact's chunk). As Seal,
// it is deterministic.
func (k *DataKey) SealBytes(ws, scope string, b []byte) []byte {
	ad := aad(ws, scope)
	m := hmac.New(sha256.New, k.mac)
	m.Write(ad)
	m.Write(b)
	nonce := m.Sum(nil)[:chacha20poly1305.NonceSizeX]
	return k.aead.Seal(nonce, nonce, b, ad)
}

// OpenBytes returns the plaintext SealBytes sealed in scope of workspace
// ws, or an error when it does not open there.
func (k *DataKey) OpenBytes(ws, scope string, sealed []byte) ([]byte, error) {
	if len(sealed) < chacha20poly1305.NonceSizeX+k.aead.Overhead() {
		return nil, errors.New("seal: a sealed value is malformed")
	}
	nonce := sealed[:chacha20poly1305.NonceSizeX]
	return k.aead.Open(nil, nonce, sealed[chacha20poly1305.NonceSizeX:], aad(ws, scope))
}

// open returns the plaintext of the sealed token body (what follows the
// prefix: "<scope>:<base64>") of workspace ws.
func (k *DataKey) open(ws, scope string, b64 []byte) ([]byte, error) {
	sealed, err := base64.RawURLEncoding.AppendDecode(nil, b64)
	if err != nil {
		return nil, errors.New("seal: a sealed value is malformed")
	}
	return k.OpenBytes(ws, scope, sealed)
}

// KeyFunc returns the data key of scope in workspace ws: ErrShredded when
// it was shredded.
type KeyFunc func(ws, scope string) (*DataKey, error)

// OpenAll returns b, a JSON document of workspace ws, with every sealed
// value in it replaced by its plaintext, or by "[shredded]" when its key
// was shredded. b itself is returned when it holds none. A value whose
// key cannot be read (not ErrShredded), or that does not open, is an
// error: nothing is answered from a payload that may have been tampered
// with.
func OpenAll(b []byte, ws string, key KeyFunc) ([]byte, error) {
	return replaceSealed(b, "", func(out []byte, scope string, body []byte) ([]byte, error) {
		k, err := key(ws, scope)
		switch {
		case errors.Is(err, ErrShredded):
			return append(out, strconv.Quote(schemas.Shredded)...), nil
		case err != nil:
			return nil, err
		}
		plain, err := k.open(ws, scope, body)
		if err != nil {
			return nil, fmt.Errorf("seal: a sealed value of scope %s does not open: %w", scope, err)
		}
		return append(out, plain...), nil
	})
}

// replaceSealed returns b, a JSON document, with each sealed value of a
// scope beginning with scopePrefix ("" for every scope) replaced by what
// f appends to out for it, given the value's scope and its body (the
// base64 after "<scope>:"); b itself when it holds none. A sealed prefix
// after an escaped quote is inside a string: text, left as it is.
func replaceSealed(b []byte, scopePrefix string, f func(out []byte, scope string, body []byte) ([]byte, error)) ([]byte, error) {
	open := []byte(`"` + schemas.SealedPrefix + scopePrefix)
	i := bytes.Index(b, open)
	if i < 0 {
		return b, nil
	}
	out := make([]byte, 0, len(b)+len(b)/16)
	for ; i >= 0; i = bytes.Index(b, open) {
		if i > 0 && b[i-1] == '\\' {
			out = append(out, b[:i+1]...)
			b = b[i+1:]
			continue
		}
		out = append(out, b[:i]...)
		rest := b[i+len(open)-len(scopePrefix):]
		end := bytes.IndexByte(rest, '"')
		colon := bytes.IndexByte(rest, ':')
		if end < 0 || colon < 0 || colon > end {
			return nil, errors.New("seal: a sealed value is malformed")
		}
		var err error
		if out, err = f(out, string(rest[:colon]), rest[colon+1:end]); err != nil {
			return nil, err
		}
		b = rest[end+1:]
	}
	return append(out, b...), nil
}

// QueueKey returns the raw queue key of queue in workspace ws for epoch
// (QueueEpoch), derived from k, the workspace's data key: the key the
// service seals that day's work items of the queue with (Reseal), and hands
// the queue's executors (the queue.key query) so that they open the items
// themselves. It is derived, never stored: once the workspace's key is
// shredded, no queue key of it can be made again.
func (k *DataKey) QueueKey(ws, queue string, epoch int64) []byte {
	m := hmac.New(sha256.New, k.derive)
	m.Write([]byte("dwr queue key 1\x00" + ws + "\x00" + queue + "\x00" + strconv.FormatInt(epoch, 10)))
	return m.Sum(nil)
}

// Reseal returns b, a JSON document of workspace ws, with every value
// sealed in scope from (by the key of from) sealed again by to in scope
// toScope; the values of other scopes are left as they are, and b itself
// is returned when it holds none of from. It fails as OpenAll does on a
// value that does not open.
func Reseal(b []byte, ws, from string, fromKey, to *DataKey, toScope string) ([]byte, error) {
	return replaceSealed(b, from+":", func(out []byte, _ string, body []byte) ([]byte, error) {
		plain, err := fromKey.open(ws, from, body)
		if err != nil {
			return nil, fmt.Errorf("seal: a sealed value of scope %s does not open: %w", from, err)
		}
		return append(out, to.Seal(ws, toScope, plain)...), nil
	})
}

// Scopes returns the scopes of the sealed values in b, each once, in the
// order they first appear.
func Scopes(b []byte) []string {
	open := []byte(`"` + schemas.SealedPrefix)
	var out []string
	for i := bytes.Index(b, open); i >= 0; i = bytes.Index(b, open) {
		if i > 0 && b[i-1] == '\\' {
			b = b[i+1:]
			continue
		}
		rest := b[i+len(open):]
		colon := bytes.IndexByte(rest, ':')
		end := bytes.IndexByte(rest, '"')
		if colon < 0 || end < 0 || colon > end {
			return append(out, "") // malformed: no scope opens it
		}
		if s := string(rest[:colon]); !slices.Contains(out, s) {
			out = append(out, s)
		}
		b = rest[end+1:]
	}
	return out
}
