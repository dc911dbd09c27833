package projections

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
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
	// CacheBytes bounds the bytes, as stored, of the goals and tasks kept
	// decoded in memory (default 64 MiB): a backlog of tasks with large
	// inputs would otherwise hold them all (a client creating tasks of
	// 250 KiB took the heap past 5 GiB).
	CacheBytes int
	// OnDamaged, when set, makes Open move views it cannot open, or whose
	// files fail their checksums, aside (to <dir>.corrupt-<UTC time>) and
	// open empty ones in their place; catching up then rebuilds them from
	// the log. It is called with where the damaged views went and why. Reset
	// calls it too. When nil, Open returns an error wrapping ErrDamaged.
	OnDamaged func(movedTo string, cause error)
}

func (o Options) withDefaults() Options {
	o.CacheEntries = cmp.Or(o.CacheEntries, 100_000)
	o.CacheBytes = cmp.Or(o.CacheBytes, 64<<20)
	if o.Upcasters == nil {
		o.Upcasters = DomainUpcasters()
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	return o
}

// Store is the Pebble-backed set of views. It is safe for concurrent use:
// Apply is serialised; readers see the state as of some checkpoint.
type Store struct {
	db   *pebble.DB
	lock *pebble.Lock
	dir  string
	opts Options

	mu         sync.RWMutex // guards checkpoint, logTip, advanced, the cache and the damage
	checkpoint uint64
	logTip     eventstore.LogTip
	advanced   chan struct{} // closed and replaced whenever checkpoint moves
	cache      map[string]any
	cacheSizes map[string]int                             // the stored bytes of the cached goals and tasks
	cacheBytes int                                        // their sum
	applied    atomic.Pointer[func(c *eventstore.Commit)] // OnApplied
	damaged    chan struct{}                              // closed when Pebble reports on-disk corruption
	damage     error                                      // the first corruption reported
	reports    *atomic.Pointer[Store]                     // the store Pebble's corruption reports go to

	// gen moves whenever the views change under the cache (a record
	// applied, the views replaced): a state read from Pebble is cached only
	// if gen did not move while it was read, so that a reader that read
	// before a record was applied cannot put back what the record changed.
	gen uint64 // guarded by mu
	// afterRead, when set (tests), runs between load's read from Pebble and
	// its caching of what it read.
	afterRead func()

	applyMu sync.Mutex
	// reads counts the reads using db, and closing turns new ones away:
	// Close and Reset wait for the reads under way before they close db
	// (Pebble must not be closed under an open iterator). drained wakes the
	// closer when the last read ends.
	reads   atomic.Int64
	closing atomic.Bool
	drained chan struct{}
	// keys answers a lookup of a goal, task or command never written
	// without Pebble; nil until Open has filled it.
	keys *keyFilter
	// pebbleGets counts the lookups and scans that reached Pebble (tests).
	pebbleGets atomic.Int64
	// logBytes counts the log's bytes by workspace (logbytes.go).
	logBytes *logBytes
}

var (
	// ErrClosed is returned by a Store used after Close.
	ErrClosed = errors.New("projections: store is closed")

	// ErrDamaged is wrapped by errors reporting views that cannot be used
	// as they are and must be rebuilt from the log: files that cannot be
	// opened or fail their checksums, Pebble reporting corruption or
	// panicking, views written before the log was chained, or views holding
	// records that an accepted prefix discarded. The log is not at fault.
	ErrDamaged = errors.New("projections: the views are damaged")
)

// Open opens (creating if needed) the views in dir, and checks the
// checksums of all their files. It returns an error wrapping ErrDamaged for
// views that cannot be opened or are corrupt (unless Options.OnDamaged is
// set: they are then moved aside and empty views opened), and an error for
// views that another process holds.
func Open(dir string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	s, err := open(dir, opts)
	if err == nil || !errors.Is(err, ErrDamaged) || opts.OnDamaged == nil {
		return s, err
	}
	moved, merr := moveAside(opts.FS, dir)
	if merr != nil {
		return nil, fmt.Errorf("projections: move the damaged views in %s aside: %w (the damage: %w)", dir, merr, err)
	}
	opts.OnDamaged(moved, err)
	return open(dir, opts)
}

// moveAside renames dir to dir.corrupt-<UTC time> and returns the new name.
func moveAside(fs vfs.FS, dir string) (string, error) {
	to := fmt.Sprintf("%s.corrupt-%s", dir, time.Now().UTC().Format("20060102T150405.000000000Z"))
	return to, fs.Rename(dir, to)
}

func open(dir string, opts Options) (_ *Store, err error) {
	if err := opts.FS.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("projections: create %s: %w", dir, err)
	}
	lock, err := pebble.LockDirectory(dir, opts.FS)
	if err != nil {
		return nil, fmt.Errorf("projections: the views in %s are in use: %w", dir, err)
	}
	s := &Store{lock: lock, dir: dir, opts: opts, advanced: make(chan struct{}), cache: map[string]any{}, cacheSizes: map[string]int{},
		damaged: make(chan struct{}), drained: make(chan struct{}, 1), reports: &atomic.Pointer[Store]{}}
	s.reports.Store(s)
	reports := s.reports
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: open %s: pebble panicked: %v", ErrDamaged, dir, r)
		}
		if err != nil {
			if s.db != nil {
				func() {
					defer func() { _ = recover() }()
					_ = s.db.Close()
				}()
			}
			_ = lock.Close()
		}
	}()
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref()
	// The memtable is allocated outside the Go heap (so --memory-limit
	// does not bound it) and grows from 256 KiB up to this as views are
	// written. 16 MiB, up to four queued while they flush: at 2,000 chains
	// in flight ~8 MiB less peak RSS than 32 MiB with two, for no CPU that
	// three alternated rounds could tell from their noise; 16 MiB with only
	// two queued stalled the views' writes (half the throughput).
	po := &pebble.Options{
		FS:                          noPreallocFS{opts.FS},
		Lock:                        lock,
		Cache:                       cache,
		MemTableSize:                16 << 20,
		MemTableStopWritesThreshold: 4,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      pebbleLogger{opts.Logger},
		// Pebble's default on corruption is to log fatally (our logger
		// panics): report it instead; the read returns the error.
		EventListener: &pebble.EventListener{DataCorruption: func(i pebble.DataCorruptionInfo) {
			reports.Load().corrupt(fmt.Errorf("%w: %s: %w", ErrDamaged, i.Path, i.Details))
		}},
	}
	po.CompactionConcurrencyRange = func() (int, int) { return 1, 2 }
	// Bloom filters make a lookup of a key that is not there (a new command
	// id, a new aggregate) skip the tables that cannot hold it.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %w", ErrDamaged, dir, err)
	}
	s.db = db
	if err := s.checkFiles(po); err != nil {
		return nil, err
	}
	if s.checkpoint, err = s.readCheckpoint(); err != nil {
		return nil, err
	}
	if err := s.indexTimersByWorkspace(); err != nil {
		return nil, err
	}
	if err := s.loadLogBytes(); err != nil {
		return nil, err
	}
	keys := newKeyFilter()
	if err := keys.fill(db); err != nil {
		return nil, fmt.Errorf("%w: read the keys of %s: %w", ErrDamaged, dir, err)
	}
	s.keys = keys
	return s, nil
}

// checkFiles reads every block of every table and checks its checksum, so
// that a damaged file is found now rather than by a query. It costs one read
// of the views' files.
func (s *Store) checkFiles(po *pebble.Options) error {
	levels, err := s.db.SSTables()
	if err != nil {
		return fmt.Errorf("%w: list the tables of %s: %w", ErrDamaged, s.dir, err)
	}
	ro := po.MakeReaderOptions()
	for _, level := range levels {
		for _, t := range level {
			if t.BackingType != pebble.BackingTypeLocal {
				continue
			}
			path := s.opts.FS.PathJoin(s.dir, fmt.Sprintf("%s.sst", t.BackingSSTNum))
			if err := checkTable(s.opts.FS, path, ro); err != nil {
				return fmt.Errorf("%w: table %s: %w", ErrDamaged, path, err)
			}
		}
	}
	return nil
}

func checkTable(fs vfs.FS, path string, ro sstable.ReaderOptions) error {
	f, err := fs.Open(path)
	if err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		_ = f.Close()
		return err
	}
	r, err := sstable.NewReader(context.Background(), readable, ro)
	if err != nil {
		_ = readable.Close()
		return err
	}
	defer func() { _ = r.Close() }()
	return r.ValidateBlockChecksums()
}

// readCheckpoint loads the checkpoint and the log tip.
func (s *Store) readCheckpoint() (uint64, error) {
	var cp uint64
	v, closer, err := s.db.Get([]byte(pCheckpoint))
	switch {
	case err == nil:
		if len(v) != 8 {
			_ = closer.Close()
			return 0, fmt.Errorf("%w: a checkpoint of %d bytes", ErrDamaged, len(v))
		}
		cp = binary.BigEndian.Uint64(v)
		_ = closer.Close()
	case errors.Is(err, pebble.ErrNotFound):
	default:
		return 0, fmt.Errorf("%w: read the checkpoint: %w", ErrDamaged, err)
	}
	ok, err := s.get([]byte(pLogTip), &s.logTip)
	if err != nil {
		return 0, err
	}
	if !ok && cp > 0 {
		// Views written before the log was chained: the tip they stand on
		// is not known. Rebuilding them verifies the whole log, once.
		return 0, fmt.Errorf("%w: the views at log sequence %d predate the log's chain (they hold no verified tip)", ErrDamaged, cp)
	}
	return cp, nil
}

// corrupt records that Pebble reported on-disk corruption.
func (s *Store) corrupt(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.damage == nil {
		s.damage = err
		close(s.damaged)
	}
}

// Damaged is closed once Pebble has reported corruption in the views' files
// (DamageErr says what): they must be rebuilt, which the next start does.
func (s *Store) Damaged() <-chan struct{} {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.damaged
}

// DamageErr returns the first corruption Pebble reported, or nil.
func (s *Store) DamageErr() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.damage
}

// Dir returns the views' directory.
func (s *Store) Dir() string { return s.dir }

// Reset moves the views aside (to <dir>.corrupt-<UTC time>) and opens empty
// ones in their place: catching up then rebuilds them from the log. It is
// for a damaged store found at start (an error wrapping ErrDamaged), while
// nothing else uses it; cause says why, for Options.OnDamaged. It returns
// where the old views went.
func (s *Store) Reset(cause error) (string, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.db != nil {
		s.quiesce()
		func() {
			defer func() { _ = recover() }()
			_ = s.db.Close()
		}()
		s.db = nil
	}
	if s.lock != nil {
		_ = s.lock.Close()
		s.lock = nil
	}
	moved, err := moveAside(s.opts.FS, s.dir)
	if err != nil {
		return "", fmt.Errorf("projections: move the views in %s aside: %w", s.dir, err)
	}
	if s.opts.OnDamaged != nil {
		s.opts.OnDamaged(moved, cause)
	}
	fresh, err := open(s.dir, s.opts)
	if err != nil {
		return moved, err
	}
	s.mu.Lock()
	s.db, s.lock = fresh.db, fresh.lock
	s.closing.Store(false) // reads may use the fresh views
	s.checkpoint, s.logTip = fresh.checkpoint, fresh.logTip
	s.logBytes = fresh.logBytes
	s.clearCache()
	s.gen++
	s.damaged, s.damage = make(chan struct{}), nil
	s.mu.Unlock()
	// The fresh Pebble reports to fresh; from now on s is the store.
	fresh.reports.Store(s)
	s.reports = fresh.reports
	return moved, nil
}

// Close flushes the store's memory table to its files and closes it. It is
// safe to call twice.
func (s *Store) Close() error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.db == nil {
		return nil
	}
	s.quiesce()
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: close: pebble panicked: %v", ErrDamaged, r)
			}
		}()
		// Flushed, the views open without replaying their write-ahead log.
		err = errors.Join(s.db.Flush(), s.db.Close())
	}()
	s.db = nil
	if s.lock != nil {
		_ = s.lock.Close()
		s.lock = nil
	}
	return err
}

// enter registers a read of db, paired with leave; false (nothing to
// leave) once Close or Reset has begun: the read returns ErrClosed. A read
// nested in another (a listing's lookups) enters again.
func (s *Store) enter() bool {
	s.reads.Add(1)
	if s.closing.Load() {
		s.leave()
		return false
	}
	return true
}

// leave ends a read enter registered.
func (s *Store) leave() {
	if s.reads.Add(-1) == 0 && s.closing.Load() {
		select {
		case s.drained <- struct{}{}:
		default:
		}
	}
}

// quiesce turns new reads away and waits for those under way to end (each
// is bounded: a lookup, or a scan of a page). The caller holds applyMu.
// A read that leaves after closing is set sees it, and the last one wakes
// quiesce (a wake-up left from before only makes it look again).
func (s *Store) quiesce() {
	s.closing.Store(true)
	for s.reads.Load() != 0 {
		<-s.drained
	}
}

// LogTip returns the last log record applied, as verified: its position,
// sequence and hash (the zero LogTip before the first).
func (s *Store) LogTip() eventstore.LogTip {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.logTip
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
	ok, _, err := s.getSized(k, v)
	return ok, err
}

// getSized is get that also returns the bytes the value took as stored.
func (s *Store) getSized(k []byte, v any) (_ bool, size int, err error) {
	if !s.enter() {
		return false, 0, ErrClosed
	}
	defer s.leave()
	defer s.recoverInto(&err)
	if s.keys != nil && filtered(k) && !s.keys.mayContain(k) {
		return false, 0, nil
	}
	s.pebbleGets.Add(1)
	b, closer, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("projections: get %q: %w", k, s.damagedErr(err))
	}
	defer func() { _ = closer.Close() }()
	if err := fastjson.Unmarshal(b, v); err != nil {
		return false, 0, fmt.Errorf("projections: decode %q: %w", k, err)
	}
	return true, len(b), nil
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
	return s.scanDir(lower, upper, false, fn)
}

// scanRangeReverse is scanRange from the greatest key down.
func (s *Store) scanRangeReverse(lower, upper []byte, fn func(k, v []byte) error) error {
	return s.scanDir(lower, upper, true, fn)
}

// scanDir is scanRange, from the greatest key down when reverse.
func (s *Store) scanDir(lower, upper []byte, reverse bool, fn func(k, v []byte) error) (err error) {
	if !s.enter() {
		return ErrClosed
	}
	defer s.leave()
	defer s.recoverInto(&err)
	s.pebbleGets.Add(1)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return s.damagedErr(err)
	}
	defer func() { _ = it.Close() }()
	first, next := it.First, it.Next
	if reverse {
		first, next = it.Last, it.Prev
	}
	for first(); it.Valid(); next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			if errors.Is(err, errStop) {
				return nil
			}
			return err
		}
	}
	return s.damagedErr(it.Error())
}

// damagedErr marks err as ErrDamaged when Pebble reports corruption.
func (s *Store) damagedErr(err error) error {
	if err == nil || !errors.Is(err, pebble.ErrCorruption) || errors.Is(err, ErrDamaged) {
		return err
	}
	err = fmt.Errorf("%w: %w", ErrDamaged, err)
	s.corrupt(err)
	return err
}

// recoverInto turns a panic of Pebble's, at the boundary of a read or a
// write, into an error wrapping ErrDamaged: views are derived, so a broken
// file is a reason to rebuild them, not to crash.
func (s *Store) recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: pebble panicked: %v", ErrDamaged, r)
		s.corrupt(*err)
	}
}

// Dump writes every row of the store, key and value, in key order: two stores
// hold the same views exactly when their dumps are equal.
func (s *Store) Dump(w io.Writer) error { return s.dump(w, nil) }

// dump is Dump, passing over the keys skip reports (nil: none).
func (s *Store) dump(w io.Writer, skip func(k []byte) bool) error {
	return s.scan(nil, func(k, v []byte) error {
		if skip != nil && skip(k) {
			return nil
		}
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
	v, ok, _ := s.cachedAt(k)
	return v, ok
}

// cachedAt is cached, with the cache's generation for remember.
func (s *Store) cachedAt(k string) (any, bool, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.cache[k]
	return v, ok, s.gen
}

// aggKey is the key of the state of goal or task id.
func aggKey(typ, id string) []byte {
	if typ == domain.AggGoal {
		return key(pGoal, id)
	}
	return key(pTask, id)
}

// forget takes goal or task id out of the cache, with its tip and, for a
// task, its dependents, for a goal, its counts. The caller holds s.mu.
func (s *Store) forget(typ, id string) {
	s.uncache(string(aggKey(typ, id)))
	delete(s.cache, string(key(pTip, typ, id)))
	if typ == domain.AggTask {
		delete(s.cache, string(key(pDependents, id)))
	} else {
		delete(s.cache, string(key(pGoalCounts, id)))
	}
}

// addDependent adds task id to the cached dependents of task d, in the
// order Dependents reads them. The caller holds s.mu.
func (s *Store) addDependent(d, id string) {
	k := string(key(pDependents, d))
	v, ok := s.cache[k]
	if !ok {
		return
	}
	ids := v.([]string)
	i, found := slices.BinarySearch(ids, id)
	if !found {
		// A new slice: readers may hold the cached one.
		s.cache[k] = slices.Insert(slices.Clip(ids), i, id)
	}
}

// remember caches v, read from Pebble under k when the cache's generation
// was gen, unless the views changed since (v may be older than them).
func (s *Store) remember(gen uint64, k string, v any, size int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return
	}
	s.cacheSized(k, v, size)
	s.trimCache()
}

// cacheSized caches v under k, counting size bytes for it. The caller
// holds s.mu.
func (s *Store) cacheSized(k string, v any, size int) {
	s.uncache(k)
	s.cache[k] = v
	if size > 0 {
		s.cacheSizes[k] = size
		s.cacheBytes += size
	}
}

// uncache takes k out of the cache. The caller holds s.mu.
func (s *Store) uncache(k string) {
	delete(s.cache, k)
	if n, ok := s.cacheSizes[k]; ok {
		delete(s.cacheSizes, k)
		s.cacheBytes -= n
	}
}

// trimCache empties the cache once it holds more than Options.CacheEntries
// entries or CacheBytes bytes: crude but bounded; hot aggregates come back
// on the next read. The caller holds s.mu.
func (s *Store) trimCache() {
	if len(s.cache) > s.opts.CacheEntries || s.cacheBytes > s.opts.CacheBytes {
		s.clearCache()
	}
}

// clearCache empties the cache. The caller holds s.mu.
func (s *Store) clearCache() {
	clear(s.cache)
	clear(s.cacheSizes)
	s.cacheBytes = 0
}

// Workspace returns the workspace named name, or nil.
func (s *Store) Workspace(name string) (*domain.Workspace, error) {
	return load[domain.Workspace](s, pWorkspace, name)
}

// Goal returns the goal with id, or nil.
func (s *Store) Goal(id string) (*domain.Goal, error) { return load[domain.Goal](s, pGoal, id) }

// Task returns the task with id, or nil.
func (s *Store) Task(id string) (*domain.Task, error) { return load[domain.Task](s, pTask, id) }

// Ritual returns the ritual whose aggregate id is id (domain.RitualID), or
// nil.
func (s *Store) Ritual(id string) (*domain.Ritual, error) { return load[domain.Ritual](s, pRitual, id) }

// Schedule returns the schedule whose aggregate id is id
// (domain.ScheduleID), deleted ones included, or nil.
func (s *Store) Schedule(id string) (*domain.Schedule, error) {
	return load[domain.Schedule](s, pSchedule, id)
}

// RitualVersion returns the version numbered version of ritual id, or nil.
func (s *Store) RitualVersion(id string, version uint64) (*domain.RitualVersion, error) {
	var v domain.RitualVersion
	ok, err := s.get(ritualVersionKey(id, version), &v)
	if err != nil || !ok {
		return nil, err
	}
	return &v, nil
}

// load returns the state stored under prefix and id, from the cache when it
// is there, or nil when there is none.
func load[S any](s *Store, prefix, id string) (*S, error) {
	k := string(key(prefix, id))
	v, ok, gen := s.cachedAt(k)
	if ok {
		return v.(*S), nil
	}
	var st S
	ok, size, err := s.getSized([]byte(k), &st)
	if err != nil || !ok {
		return nil, err
	}
	if s.afterRead != nil {
		s.afterRead()
	}
	s.remember(gen, k, &st, size)
	return &st, nil
}

// GoalByKey returns the id of the goal of workspace ws that took key
// (domain.CreateGoal.Key) last — made with it, or reopened — or "" when
// none did.
func (s *Store) GoalByKey(ws, k string) (string, error) {
	var id string
	_, err := s.get(key(pGoalKey, ws, k), &id)
	return id, err
}

// Dependents returns the ids of the tasks that depend on task id, in the
// order of their ids. The caller must not change the slice.
func (s *Store) Dependents(id string) ([]string, error) {
	ck := string(key(pDependents, id))
	v, ok, gen := s.cachedAt(ck)
	if ok {
		return v.([]string), nil
	}
	out, err := s.scanDependents(id)
	if err == nil {
		s.remember(gen, ck, out, 0)
	}
	return out, err
}

// scanDependents reads the dependents of task id from Pebble.
func (s *Store) scanDependents(id string) ([]string, error) {
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
	t, err := s.tip(aggType, id)
	return t.Version, t.Hash, err
}

// tip returns the tip of an aggregate's chain: from the cache, or else as
// its history ends.
func (s *Store) tip(aggType, id string) (tip, error) {
	if v, ok := s.cached(string(key(pTip, aggType, id))); ok {
		return v.(tip), nil
	}
	return s.lastEvent(aggType, id)
}

// lastEvent returns the tip of an aggregate's chain as its history ends:
// its last event's version and the hash of its stored bytes (the zero tip
// when it has none). Views written before kept it in a row of its own
// (pTip), which nothing reads now.
func (s *Store) lastEvent(aggType, id string) (_ tip, err error) {
	if !s.enter() {
		return tip{}, ErrClosed
	}
	defer s.leave()
	defer s.recoverInto(&err)
	s.pebbleGets.Add(1)
	lower := key(pHistory, aggType, id, "")
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upperBound(lower)})
	if err != nil {
		return tip{}, s.damagedErr(err)
	}
	defer func() { _ = it.Close() }()
	if !it.Last() {
		return tip{}, s.damagedErr(it.Error())
	}
	k := it.Key()
	if len(k) != len(lower)+8 {
		return tip{}, fmt.Errorf("%w: history key %q of %s %s is not its id and a version", ErrDamaged, k, aggType, id)
	}
	ref, err := decodeRef(it.Value())
	if err != nil {
		return tip{}, fmt.Errorf("history of %s %s: %w", aggType, id, err)
	}
	return tip{Version: binary.BigEndian.Uint64(k[len(lower):]), Hash: ref.hash}, nil
}

// tip is where an aggregate's hash chain ends: its last event's version and
// the hash of that event's stored bytes.
type tip struct {
	Version uint64
	Hash    string
}

// CommandOutcome is the first outcome of a command, kept for its retries.
type CommandOutcome struct {
	Seq   uint64          `json:"seq"`
	Reply json.RawMessage `json:"reply"`
	Error json.RawMessage `json:"error,omitempty"` // the recorded refusal, instead of a reply
	Body  string          `json:"body,omitempty"`  // the command as sent, "<name>:<digest>"
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
