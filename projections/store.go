package projections

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// FS is the file system; nil means the real one. Tests use vfs.NewMem().
	FS vfs.FS
	// Logger receives Pebble's messages; nil discards them.
	Logger *slog.Logger
	// Upcasters bring old event payloads to the current version when read.
	// Default: DomainUpcasters().
	Upcasters *eventstore.Upcasters
	// CacheEntries bounds the decoded aggregates kept in memory (default 100,000).
	CacheEntries int
}

// Store is the Pebble-backed set of views. It is safe for concurrent use:
// Apply is serialised; readers see the state as of some checkpoint.
type Store struct {
	db   *pebble.DB
	opts Options

	mu         sync.RWMutex // guards checkpoint, advanced and the cache
	checkpoint uint64
	advanced   chan struct{} // closed and replaced whenever checkpoint moves
	cache      map[string]any

	applyMu sync.Mutex
}

// ErrClosed is returned by a Store used after Close.
var ErrClosed = errors.New("projections: store is closed")

// Open opens (creating if needed) the views in dir.
func Open(dir string, opts Options) (*Store, error) {
	if opts.CacheEntries == 0 {
		opts.CacheEntries = 100_000
	}
	if opts.Upcasters == nil {
		opts.Upcasters = DomainUpcasters()
	}
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref()
	po := &pebble.Options{
		FS:                 opts.FS,
		Cache:              cache,
		MemTableSize:       64 << 20,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             pebbleLogger{opts.Logger},
	}
	po.CompactionConcurrencyRange = func() (int, int) { return 1, 2 }
	// Bloom filters make a lookup of a key that is not there (a new command
	// id, a new aggregate) skip the tables that cannot hold it.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("projections: open %s: %w", dir, err)
	}
	s := &Store{db: db, opts: opts, advanced: make(chan struct{}), cache: map[string]any{}}
	v, closer, err := db.Get([]byte(pCheckpoint))
	switch {
	case err == nil:
		s.checkpoint = binary.BigEndian.Uint64(v)
		_ = closer.Close()
	case errors.Is(err, pebble.ErrNotFound):
	default:
		_ = db.Close()
		return nil, fmt.Errorf("projections: read checkpoint: %w", err)
	}
	return s, nil
}

// Close flushes and closes the store. It is safe to call twice.
func (s *Store) Close() error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.db.Close()
	s.db = nil
	return err
}

// Checkpoint returns the sequence of the last log record applied.
func (s *Store) Checkpoint() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.checkpoint
}

// WaitFor returns once the store has applied the record at seq, or ctx's
// error when it ends first.
func (s *Store) WaitFor(ctx context.Context, seq uint64) error {
	for {
		s.mu.RLock()
		cp, ch := s.checkpoint, s.advanced
		s.mu.RUnlock()
		if cp >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	if p.l != nil {
		p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	if p.l != nil {
		p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	}
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	if p.l != nil {
		p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	}
	panic(fmt.Sprintf(format, args...))
}

// get decodes the value at k into v; false when absent.
func (s *Store) get(k []byte, v any) (bool, error) {
	if s.db == nil {
		return false, ErrClosed
	}
	b, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("projections: get %q: %w", k, err)
	}
	defer func() { _ = closer.Close() }()
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("projections: decode %q: %w", k, err)
	}
	return true, nil
}

// errStop ends a scan early without an error.
var errStop = errors.New("projections: stop")

// scan calls fn for every key with prefix p, in order; fn may return errStop
// to end early.
func (s *Store) scan(p []byte, fn func(k, v []byte) error) error {
	return s.scanRange(p, upperBound(p), fn)
}

// scanRange calls fn for every key in [lower, upper), in order.
func (s *Store) scanRange(lower, upper []byte, fn func(k, v []byte) error) error {
	if s.db == nil {
		return ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	defer func() { _ = it.Close() }()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
	return it.Error()
}

// Dump writes every row of the store, key and value, in key order: two stores
// hold the same views exactly when their dumps are equal.
func (s *Store) Dump(w io.Writer) error {
	return s.scan(nil, func(k, v []byte) error {
		var n [16]byte
		binary.BigEndian.PutUint64(n[:8], uint64(len(k)))
		binary.BigEndian.PutUint64(n[8:], uint64(len(v)))
		if _, err := w.Write(n[:]); err != nil {
			return err
		}
		if _, err := w.Write(k); err != nil {
			return err
		}
		_, err := w.Write(v)
		return err
	})
}

func (s *Store) cached(k string) (any, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.cache[k]
	return v, ok
}

func (s *Store) remember(k string, v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.cache) >= s.opts.CacheEntries {
		clear(s.cache) // crude but bounded; hot aggregates come back on the next read
	}
	s.cache[k] = v
}

// Workspace returns the workspace named name, or nil.
func (s *Store) Workspace(name string) (*domain.Workspace, error) {
	k := string(key(pWorkspace, name))
	if v, ok := s.cached(k); ok {
		return v.(*domain.Workspace), nil
	}
	var w domain.Workspace
	ok, err := s.get([]byte(k), &w)
	if err != nil || !ok {
		return nil, err
	}
	s.remember(k, &w)
	return &w, nil
}

// Goal returns the goal with id, or nil.
func (s *Store) Goal(id string) (*domain.Goal, error) {
	k := string(key(pGoal, id))
	if v, ok := s.cached(k); ok {
		return v.(*domain.Goal), nil
	}
	var g domain.Goal
	ok, err := s.get([]byte(k), &g)
	if err != nil || !ok {
		return nil, err
	}
	s.remember(k, &g)
	return &g, nil
}

// Task returns the task with id, or nil.
func (s *Store) Task(id string) (*domain.Task, error) {
	k := string(key(pTask, id))
	if v, ok := s.cached(k); ok {
		return v.(*domain.Task), nil
	}
	var t domain.Task
	ok, err := s.get([]byte(k), &t)
	if err != nil || !ok {
		return nil, err
	}
	s.remember(k, &t)
	return &t, nil
}

// Dependents returns the ids of the tasks that depend on task id.
func (s *Store) Dependents(id string) ([]string, error) {
	p := key(pDependents, id, "")
	var out []string
	err := s.scan(p, func(k, _ []byte) error {
		out = append(out, string(k[len(p):]))
		return nil
	})
	return out, err
}

// Tip returns the version and hash of the last event of an aggregate (0 and
// "" when it has none).
func (s *Store) Tip(aggType, id string) (uint64, string, error) {
	k := key(pTip, aggType, id)
	if v, ok := s.cached(string(k)); ok {
		t := v.(tip)
		return t.Version, t.Hash, nil
	}
	var t tip
	if _, err := s.get(k, &t); err != nil {
		return 0, "", err
	}
	return t.Version, t.Hash, nil
}

type tip struct {
	Version uint64 `json:"v"`
	Hash    string `json:"h"`
}

// CommandOutcome is the first outcome of a command, kept for its retries.
type CommandOutcome struct {
	Seq   uint64          `json:"seq"`
	Reply json.RawMessage `json:"reply"`
	Error json.RawMessage `json:"error,omitempty"` // the recorded refusal, instead of a reply
}

// Command returns the first outcome of the command with idempotency key
// cmdKey (domain.CommandKey of its actor and id) in workspace ws.
func (s *Store) Command(ws, cmdKey string) (*CommandOutcome, bool, error) {
	var o CommandOutcome
	ok, err := s.get(key(pCommand, ws, cmdKey), &o)
	if err != nil || !ok {
		return nil, false, err
	}
	return &o, true, nil
}
