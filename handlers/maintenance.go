package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/projections"
)

// ErrNoLog is what OpenMaintenance returns (wrapped) for a data directory
// that holds no dwr log.
var ErrNoLog = errors.New("handlers: no dwr log")

// Maintenance is the log of a stopped service's data directory (on that
// directory's embedded NATS server, started without a listener) or of a
// cluster, and the directory's views, opened for `dwr admin`: the log's
// stream is never created or changed.
type Maintenance struct {
	dir       string
	embedded  bool // the log is the data directory's own, not a cluster's
	log       *eventstore.JetStreamLog
	js        jetstream.JetStream
	configErr error // the stream's configuration differs from the declared one
	key       *eventstore.LogKey
	close     func()
}

// MaintenanceConfig is what OpenMaintenance opens; `dwr admin`'s flags set
// it.
type MaintenanceConfig struct {
	// DataDir is a stopped `dwr serve`'s data directory: its views, and its
	// log unless External.URL is set.
	DataDir string
	// External, when its URL is set, is the cluster whose log is opened.
	External ExternalNATS
	// LogKeyFile is the file of the log key; "" for DataDir/LogKeyFile,
	// which must exist.
	LogKeyFile string
}

// OpenMaintenance opens the log of the stopped `dwr serve`'s data directory
// cfg.DataDir, or the one cfg.External reaches (a cluster's), verified with
// the log key of cfg.LogKeyFile. It returns an error wrapping
// ErrInvalidConfig when the log key cannot be read or used (or
// cfg.External's credentials), one wrapping ErrUnreachable when
// cfg.External cannot be connected to, one wrapping ErrNoLog when the data
// directory holds no log, and another when the log cannot be opened (the
// service still running on the data directory, say). Close releases it.
func OpenMaintenance(ctx context.Context, cfg MaintenanceConfig) (*Maintenance, error) {
	keyBytes, retired, err := openLogKeyRing(cfg.LogKeyFile, cfg.DataDir, false, nil)
	if err != nil {
		return nil, err
	}
	key, err := eventstore.NewLogKeyRing(keyBytes, retired...)
	if err != nil {
		return nil, classed{ErrInvalidConfig, err}
	}
	var nc *nats.Conn
	if cfg.External.URL != "" {
		if nc, err = cfg.External.Connect("dwr-admin"); err != nil {
			return nil, err
		}
	}
	return openMaintenance(ctx, cfg.DataDir, nc, key)
}

// openMaintenance opens the log of data directory dataDir when nc is nil,
// else the log that nc reaches (Close and a failed open close nc), verified
// with key.
func openMaintenance(ctx context.Context, dataDir string, nc *nats.Conn, key *eventstore.LogKey) (*Maintenance, error) {
	m := &Maintenance{dir: dataDir, key: key, embedded: nc == nil}
	if nc != nil {
		m.close = nc.Close
	} else {
		if _, err := os.Stat(filepath.Join(dataDir, "nats")); err != nil {
			return nil, classed{ErrNoLog, fmt.Errorf("%s holds no dwr log (%v)", dataDir, err)}
		}
		srv, onc, err := access.OpenStopped(dataDir, slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, fmt.Errorf("open the log in %s: %v (is `dwr serve` still running on it?)", dataDir, err)
		}
		nc = onc
		m.close = func() {
			onc.Close()
			srv.Shutdown()
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		m.close()
		return nil, err
	}
	m.js = js
	// Read-only: a maintenance command never creates or changes the stream
	// (an update could lower its replicas, or hide a change made to it).
	if m.log, m.configErr, err = eventstore.InspectJetStreamLog(ctx, js, eventstore.JetStreamConfig{}); err != nil {
		m.close()
		return nil, fmt.Errorf("open the log: %v", err)
	}
	return m, nil
}

// Close releases the log (and stops the embedded server it started).
func (m *Maintenance) Close() { m.close() }

// openViews opens the views in dir for reading, if there are any. Damaged
// views are reported, not opened (nil store, damage set).
func openViews(dir string) (s *projections.Store, damage error, err error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, nil
	}
	s, err = projections.Open(dir, projections.Options{})
	switch {
	case errors.Is(err, projections.ErrDamaged):
		return nil, err, nil
	case err != nil:
		return nil, nil, fmt.Errorf("open the views: %v (is `dwr serve` still running on them?)", err)
	}
	return s, nil, nil
}

// RebuildOptions adjust Rebuild.
type RebuildOptions struct {
	// Keep keeps the old views as views.old.
	Keep bool
	// AcceptVerifiedPrefix accepts the log's verified prefix when the log
	// fails verification: the commands after it are lost.
	AcceptVerifiedPrefix bool
	// Progress receives the progress of the rebuild, and notes; nil for
	// none.
	Progress io.Writer
}

// Rebuilt is what Rebuild did.
type Rebuilt struct {
	// Records is the number of log records the views were rebuilt from, in
	// Took; Sum is the SHA-256 of their content.
	Records uint64
	Took    time.Duration
	Sum     []byte
	// Verdict compares them with the previous views.
	Verdict string
	// Acceptance is the acceptance of the verified prefix made first, with
	// RebuildOptions.AcceptVerifiedPrefix; nil when none was needed.
	Acceptance *Acceptance
}

// RebuildRefusedError is Rebuild's refusal of a log that fails
// verification (Err, an *eventstore.IntegrityError), or that ends before
// what the current views hold: the views are left untouched. Accepting the
// verified prefix, which ends at Prefix, would lose the acknowledged
// commands Lost, and those of Unnamed records that do not decode.
type RebuildRefusedError struct {
	Err     error
	Prefix  eventstore.LogTip
	Lost    []string
	Unnamed int
}

func (e *RebuildRefusedError) Error() string { return e.Err.Error() }
func (e *RebuildRefusedError) Unwrap() error { return e.Err }

// Rebuild verifies the whole log and replays it into fresh views, compares
// them with the current ones byte for byte, and puts the rebuilt views in
// place. It returns a *RebuildRefusedError for a log that fails
// verification or ends before what the current views hold, unless
// o.AcceptVerifiedPrefix: then it accepts the verified prefix first. It
// returns an error wrapping an *eventstore.StreamConfigError when the log's
// stream is not configured as dwr's log must be, and other errors when the
// views or the log cannot be read or written.
func (m *Maintenance) Rebuild(ctx context.Context, o RebuildOptions) (*Rebuilt, error) {
	errw := o.Progress
	if errw == nil {
		errw = io.Discard
	}
	if m.configErr != nil {
		return nil, fmt.Errorf("%w\nrestore the stream's configuration first (dwr never changes it); the views were left untouched", m.configErr)
	}
	live := filepath.Join(m.dir, "views")
	old, oldDamage, err := openViews(live)
	if err != nil {
		return nil, err
	}
	closeOld := func() {
		if old != nil {
			_ = old.Close()
			old = nil
		}
	}
	defer closeOld()
	if oldDamage != nil {
		fmt.Fprintf(errw, "the current views are damaged (%v): they are replaced\n", oldDamage)
	}

	fresh := filepath.Join(m.dir, fmt.Sprintf("views.rebuild-%d", time.Now().Unix()))
	start := time.Now()
	r := &Rebuilt{}
	s, err := m.rebuildFrom(ctx, fresh, errw)
	if err == nil && old != nil {
		var beyond bool
		if beyond, err = m.viewsAhead(ctx, old, s.LogTip()); err == nil && beyond {
			_ = s.Close()
			err = &eventstore.IntegrityError{Problem: eventstore.ProblemTruncated, Prefix: s.LogTip(),
				Detail: fmt.Sprintf("the current views had applied up to %s, the log now ends at %s", old.LogTip(), s.LogTip())}
		}
	}
	if errors.Is(err, eventstore.ErrIntegrity) {
		_ = os.RemoveAll(fresh)
		if !o.AcceptVerifiedPrefix {
			return nil, refusal(err, old)
		}
		if r.Acceptance, err = AcceptVerifiedPrefix(ctx, m.log, m.key, old, "dwr-admin", time.Now(), slog.New(slog.DiscardHandler)); err != nil {
			return nil, fmt.Errorf("accept the verified prefix: %v", err)
		}
		closeOld() // the views were moved aside: a rebuild of the log replaces them
		_ = os.RemoveAll(live)
		oldDamage = fmt.Errorf("they held what the accepted prefix lost; moved to %s", r.Acceptance.ViewsMovedTo)
		start = time.Now()
		s, err = m.rebuildFrom(ctx, fresh, errw)
	}
	if err != nil {
		_ = os.RemoveAll(fresh)
		return nil, fmt.Errorf("rebuild: %v", err)
	}
	r.Took = time.Since(start)
	r.Records = s.Checkpoint()
	r.Sum, err = ViewsSum(s)
	var bare []byte // the rebuilt views' sum without the log's bytes by workspace, for views that counted them late
	if err == nil && old != nil {
		if _, _, from := old.LogBytes(""); from > 1 {
			bare, err = sumOf(s.DumpButLogBytes)
		}
	}
	_ = s.Close()
	if err != nil {
		return nil, err
	}
	r.Verdict = "no previous views"
	switch {
	case oldDamage != nil:
		r.Verdict = fmt.Sprintf("the previous views are replaced (%v)", oldDamage)
	case old != nil:
		oldSum, err := ViewsSum(old)
		oldCP := old.Checkpoint()
		_, _, oldFrom := old.LogBytes("")
		var oldBare []byte
		if err == nil && oldFrom > 1 {
			oldBare, err = sumOf(old.DumpButLogBytes)
		}
		closeOld()
		switch {
		case err != nil:
			r.Verdict = fmt.Sprintf("the previous views could not be read (%v): the rebuilt ones replace them", err)
		case oldCP != r.Records:
			r.Verdict = fmt.Sprintf("the current views were at record %d, the log ends at %d: they were behind", oldCP, r.Records)
		case bytes.Equal(oldSum, r.Sum):
			r.Verdict = "identical to the current views, byte for byte"
		case oldFrom > 1 && bytes.Equal(oldBare, bare):
			r.Verdict = fmt.Sprintf("identical to the current views but for the log's bytes by workspace, which they counted from record %d on (they were written before they counted): the rebuilt ones count the whole log", oldFrom)
		default:
			r.Verdict = "DIFFERENT from the current views: the rebuilt ones, from the log, replace them"
		}
	}
	closeOld()
	return r, swapViews(live, fresh, o.Keep)
}

// swapViews puts the views in fresh in place of those in live, keeping
// these as live.old when keep is set.
func swapViews(live, fresh string, keep bool) error {
	if _, err := os.Stat(live); err == nil {
		if keep {
			_ = os.RemoveAll(live + ".old")
			if err := os.Rename(live, live+".old"); err != nil {
				return err
			}
		} else if err := os.RemoveAll(live); err != nil {
			return err
		}
	}
	return os.Rename(fresh, live)
}

// rebuildFrom rebuilds views from the whole log in dir, verifying it.
func (m *Maintenance) rebuildFrom(ctx context.Context, dir string, errw io.Writer) (*projections.Store, error) {
	s, err := projections.Rebuild(ctx, m.log, m.key, dir, projections.Options{}, func(done, total uint64) {
		fmt.Fprintf(errw, "\rrebuilding: record %d of %d (%d%%)", done, total, done*100/max(total, 1))
	})
	fmt.Fprintln(errw)
	return s, err
}

// viewsAhead reports whether views hold records beyond the end of the log
// (tip): the log lost records they had applied.
func (m *Maintenance) viewsAhead(ctx context.Context, views *projections.Store, end eventstore.LogTip) (bool, error) {
	tip := views.LogTip()
	if tip.N == 0 {
		return false, nil
	}
	if tip.Seq > end.Seq {
		return true, nil
	}
	_, err := eventstore.ReadVerified(ctx, m.log, m.key, tip, func(uint64, *eventstore.Commit) error { return nil })
	switch {
	case err == nil, errors.Is(err, eventstore.ErrTipDiscarded):
		return false, nil
	case errors.Is(err, eventstore.ErrIntegrity):
		return true, nil
	default:
		return false, err
	}
}

// refusal returns the refusal of a rebuild that err (a failed
// verification) stopped: what accepting the verified prefix would lose, the
// commands of the records after it and those the views applied beyond it.
func refusal(err error, views *projections.Store) error {
	r := &RebuildRefusedError{Err: err}
	var ie *eventstore.IntegrityError
	if !errors.As(err, &ie) {
		return r
	}
	r.Prefix = ie.Prefix
	var cmds []string
	for _, l := range ie.Lost {
		if !l.Decoded {
			r.Unnamed++
		}
		cmds = append(cmds, l.Commands...)
	}
	if views != nil {
		if more, err := views.CommandsAfter(ie.Prefix.Seq); err == nil {
			cmds = append(cmds, more...)
		}
	}
	r.Lost = dedupe(cmds)
	return r
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// ViewsSum returns the SHA-256 of everything the views hold, as
// projections.Store.Dump writes it: two stores that hold the same have the
// same sum.
func ViewsSum(s *projections.Store) ([]byte, error) { return sumOf(s.Dump) }

// sumOf returns the SHA-256 of what dump writes.
func sumOf(dump func(io.Writer) error) ([]byte, error) {
	h := sha256.New()
	if err := dump(h); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// RotateMasterKey wraps every data key of the keys stream again with the
// master key next, in place of current (the key they are wrapped with), and
// erases the old wrappings; it returns how many keys it rewrapped. Run it
// with the service stopped, then start every replica with next. A rotation
// cut short can be run again with the same keys.
func (m *Maintenance) RotateMasterKey(ctx context.Context, prefix string, current, next []byte) (int, error) {
	if prefix == "" {
		prefix = "dwr"
	}
	st, err := m.js.Stream(ctx, eventstore.KeysStream(prefix))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil // no data key was ever made
	} else if err != nil {
		return 0, err
	}
	keys, err := eventstore.KeyringOf(m.js, st, prefix, current)
	if err != nil {
		return 0, classed{ErrInvalidConfig, err}
	}
	return keys.Rewrap(ctx, next)
}
