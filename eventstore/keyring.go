package eventstore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MasterKeyBytes is the size of the master key.
const MasterKeyBytes = 32

// ErrNoKey is the error of a data key that was never made.
var ErrNoKey = errors.New("eventstore: no such data key")

// ErrMasterKey is the error of a master key that is not the one the data
// keys were wrapped with.
var ErrMasterKey = errors.New("the master key is not the one it was wrapped with")

// headerShredded marks the tombstone a shredded key leaves: it says the
// key was shredded rather than never made.
const headerShredded = "Dwr-Shredded"

// Keyring keeps the data keys of workspaces and goals in the stream
// <PREFIX>_KEYS, one message a key on <prefix>.keys.<workspace>.<scope>,
// each wrapped (AES-256-GCM) by the master key, which never enters a
// stream. Shredding a key erases its message (JetStream's secure delete
// overwrites its bytes on disk) and leaves a tombstone. The unwrapped keys
// are kept in memory once read.
type Keyring struct {
	stream jetstream.Stream
	js     jetstream.JetStream
	prefix string

	mu     sync.Mutex
	master cipher.AEAD
	keys   map[string]*DataKey // workspace/scope → key; a shredded one is nil
}

// KeysStream returns the name of the keys stream for prefix.
func KeysStream(prefix string) string { return strings.ToUpper(prefix) + "_KEYS" }

// OpenKeyring makes the keys stream stand (replicas copies) and returns
// the keyring over it, with master (MasterKeyBytes) the key that wraps the
// data keys.
func OpenKeyring(ctx context.Context, js jetstream.JetStream, prefix string, replicas int, master []byte) (*Keyring, error) {
	aead, err := masterAEAD(master)
	if err != nil {
		return nil, err
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: KeysStream(prefix), Description: "dwr: data keys, wrapped by the master key (one a workspace or goal; shredded ones erased)",
		Subjects: []string{prefix + ".keys.>"}, Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
		// Two: a rotation stores the new wrapping before it erases the old.
		MaxMsgsPerSubject: 2, Discard: jetstream.DiscardOld, MaxMsgSize: 4 << 10, DenyDelete: false, DenyPurge: true,
	})
	if err != nil {
		return nil, fmt.Errorf("eventstore: keys stream: %w", err)
	}
	r := &Keyring{stream: st, js: js, prefix: prefix, master: aead, keys: map[string]*DataKey{}}
	if err := r.check(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// check unwraps one data key of the stream, if it holds one: a master key
// that is not the one they were wrapped with is refused at once, not at
// the first read of a payload.
func (r *Keyring) check(ctx context.Context) error {
	info, err := r.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("eventstore: keys stream: %w", err)
	}
	for seq, tries := info.State.FirstSeq, 0; seq > 0 && seq <= info.State.LastSeq && tries < 64; seq, tries = seq+1, tries+1 {
		m, err := r.stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("eventstore: keys stream: %w", err)
		}
		if m.Header.Get(headerShredded) != "" {
			continue
		}
		_, err = unwrap(r.master, m.Data, m.Subject)
		return err
	}
	return nil
}

// KeyringOf returns the keyring over the keys stream st as it stands (it
// is not created or changed: for maintenance), with master the key that
// wraps its data keys.
func KeyringOf(js jetstream.JetStream, st jetstream.Stream, prefix string, master []byte) (*Keyring, error) {
	aead, err := masterAEAD(master)
	if err != nil {
		return nil, err
	}
	return &Keyring{stream: st, js: js, prefix: prefix, master: aead, keys: map[string]*DataKey{}}, nil
}

func masterAEAD(master []byte) (cipher.AEAD, error) {
	if len(master) != MasterKeyBytes {
		return nil, fmt.Errorf("eventstore: the master key has %d bytes, not %d", len(master), MasterKeyBytes)
	}
	b, err := aes.NewCipher(master)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func (r *Keyring) subject(ws, scope string) string { return r.prefix + ".keys." + ws + "." + scope }

// Key returns the data key of scope in workspace ws, making it first when
// create is set and there is none (only the writer makes keys, before the
// record that uses one is appended). It returns ErrShredded for a key that
// was shredded, ErrNoKey for one never made (create unset).
func (r *Keyring) Key(ctx context.Context, ws, scope string, create bool) (*DataKey, error) {
	id := ws + "/" + scope
	r.mu.Lock()
	k, cached := r.keys[id]
	r.mu.Unlock()
	if cached {
		if k == nil {
			return nil, ErrShredded
		}
		return k, nil
	}
	k, err := r.read(ctx, ws, scope)
	if errors.Is(err, ErrNoKey) && create {
		k, err = r.make(ctx, ws, scope)
	}
	switch {
	case errors.Is(err, ErrShredded):
		r.remember(id, nil)
	case err == nil:
		r.remember(id, k)
	}
	return k, err
}

func (r *Keyring) remember(id string, k *DataKey) {
	r.mu.Lock()
	r.keys[id] = k
	r.mu.Unlock()
}

// read reads and unwraps a key.
func (r *Keyring) read(ctx context.Context, ws, scope string) (*DataKey, error) {
	subj := r.subject(ws, scope)
	m, err := r.stream.GetLastMsgForSubject(ctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNoKey
	}
	if err != nil {
		return nil, fmt.Errorf("eventstore: read the data key of %s: %w", subj, err)
	}
	if m.Header.Get(headerShredded) != "" {
		return nil, ErrShredded
	}
	r.mu.Lock()
	master := r.master
	r.mu.Unlock()
	raw, err := unwrap(master, m.Data, subj)
	if err != nil {
		return nil, err
	}
	return NewDataKey(raw)
}

func unwrap(master cipher.AEAD, wrapped []byte, subj string) ([]byte, error) {
	n := master.NonceSize()
	if len(wrapped) < n {
		return nil, fmt.Errorf("eventstore: the data key of %s is malformed", subj)
	}
	raw, err := master.Open(nil, wrapped[:n], wrapped[n:], []byte(subj))
	if err != nil {
		return nil, fmt.Errorf("eventstore: the data key of %s does not unwrap: %w", subj, ErrMasterKey)
	}
	return raw, nil
}

func wrap(master cipher.AEAD, raw []byte, subj string) []byte {
	nonce := make([]byte, master.NonceSize())
	_, _ = rand.Read(nonce)
	return master.Seal(nonce, nonce, raw, []byte(subj))
}

// make makes a new key, unless another was made meanwhile (or shredded),
// which it returns.
func (r *Keyring) make(ctx context.Context, ws, scope string) (*DataKey, error) {
	subj := r.subject(ws, scope)
	raw := make([]byte, DataKeyBytes)
	_, _ = rand.Read(raw)
	r.mu.Lock()
	msg := &nats.Msg{Subject: subj, Data: wrap(r.master, raw, subj)}
	r.mu.Unlock()
	if _, err := r.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithExpectStream(r.stream.CachedInfo().Config.Name)); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return r.read(ctx, ws, scope) // made (or shredded) meanwhile
		}
		return nil, fmt.Errorf("eventstore: store the data key of %s: %w", subj, err)
	}
	return NewDataKey(raw)
}

// Shred destroys the data key of scope in workspace ws for good: its
// message is erased (its bytes overwritten on disk) and a tombstone says it
// was shredded. Shredding a key shredded already, or never made, leaves the
// tombstone all the same.
func (r *Keyring) Shred(ctx context.Context, ws, scope string) error {
	subj := r.subject(ws, scope)
	m, err := r.stream.GetLastMsgForSubject(ctx, subj)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("eventstore: shred the data key of %s: %w", subj, err)
	case m.Header.Get(headerShredded) != "":
		r.remember(ws+"/"+scope, nil)
		return nil
	default:
		if err := r.stream.SecureDeleteMsg(ctx, m.Sequence); err != nil {
			return fmt.Errorf("eventstore: shred the data key of %s: %w", subj, err)
		}
	}
	tomb := &nats.Msg{Subject: subj, Header: nats.Header{headerShredded: []string{"1"}}}
	if _, err := r.js.PublishMsg(ctx, tomb); err != nil {
		return fmt.Errorf("eventstore: shred the data key of %s: the key is erased, its tombstone not stored: %w", subj, err)
	}
	r.remember(ws+"/"+scope, nil)
	return nil
}

// Forget drops the key of scope in workspace ws from memory: another
// replica shredded it.
func (r *Keyring) Forget(ws, scope string) {
	r.mu.Lock()
	delete(r.keys, ws+"/"+scope)
	r.mu.Unlock()
}

// Rewrap wraps every data key again with the master key next, in place of
// the current one (a rotation of the master key), and returns how many it
// rewrapped. From then on the keyring uses next.
func (r *Keyring) Rewrap(ctx context.Context, next []byte) (int, error) {
	aead, err := masterAEAD(next)
	if err != nil {
		return 0, err
	}
	info, err := r.stream.Info(ctx, jetstream.WithSubjectFilter(r.prefix+".keys.>"))
	if err != nil {
		return 0, fmt.Errorf("eventstore: list the data keys: %w", err)
	}
	r.mu.Lock()
	old := r.master
	r.mu.Unlock()
	n := 0
	for subj := range info.State.Subjects {
		m, err := r.stream.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			return n, fmt.Errorf("eventstore: read the data key of %s: %w", subj, err)
		}
		if m.Header.Get(headerShredded) != "" {
			continue
		}
		raw, err := unwrap(old, m.Data, subj)
		if err != nil {
			if _, again := unwrap(aead, m.Data, subj); again == nil {
				continue // rewrapped already, by a rotation cut short
			}
			return n, err
		}
		msg := &nats.Msg{Subject: subj, Data: wrap(aead, raw, subj)}
		if _, err := r.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(m.Sequence)); err != nil {
			return n, fmt.Errorf("eventstore: store the data key of %s again: %w", subj, err)
		}
		// The old wrapping is erased, not left on disk.
		if err := r.stream.SecureDeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, fmt.Errorf("eventstore: erase the old wrapping of %s: %w", subj, err)
		}
		n++
	}
	r.mu.Lock()
	r.master = aead
	r.mu.Unlock()
	return n, nil
}

// ShredWorkspace shreds every data key of workspace ws: its own and its
// goals'. The workspace's tombstone stays even when it made no key, so
// that none is made after.
func (r *Keyring) ShredWorkspace(ctx context.Context, ws string) error {
	prefix := r.prefix + ".keys." + ws + "."
	info, err := r.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return fmt.Errorf("eventstore: list the data keys of workspace %s: %w", ws, err)
	}
	scopes := []string{ScopeWorkspace}
	for subj := range info.State.Subjects {
		if s := strings.TrimPrefix(subj, prefix); s != ScopeWorkspace {
			scopes = append(scopes, s)
		}
	}
	for _, scope := range scopes {
		if err := r.Shred(ctx, ws, scope); err != nil {
			return err
		}
	}
	return nil
}

// ForgetWorkspace drops every key of workspace ws from memory.
func (r *Keyring) ForgetWorkspace(ws string) {
	r.mu.Lock()
	for id := range r.keys {
		if strings.HasPrefix(id, ws+"/") {
			delete(r.keys, id)
		}
	}
	r.mu.Unlock()
}
