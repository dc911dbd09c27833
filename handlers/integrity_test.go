package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// A log stream whose retention was changed (JetStream then drops the oldest
// records at once) refuses the start, naming the setting; the stream is
// left as it was found, never "fixed" by an update that would hide it.
func TestChangedLogStreamRefusesToStart(t *testing.T) {
	b := setupJetStream(t)
	for range 5 {
		b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
	}
	dir := b.dir
	b.stop()
	servicetest.OnStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) {
		s, err := js.Stream(ctx, "DWR_LOG")
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		cfg.MaxMsgs = 3
		_, err = js.UpdateStream(ctx, cfg)
		require.NoError(t, err)
	})

	_, err := servicetest.TryStart(t, dir, servicetest.Options{})
	require.ErrorIs(t, err, eventstore.ErrIntegrity)
	require.ErrorContains(t, err, "stream DWR_LOG")
	require.ErrorContains(t, err, "max_msgs is 3, want -1 (unlimited)")
	servicetest.OnStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) {
		s, err := js.Stream(ctx, "DWR_LOG")
		require.NoError(t, err)
		require.Equal(t, int64(3), s.CachedInfo().Config.MaxMsgs, "the service did not change the stream")
	})
}

func otherKey(t *testing.T) *eventstore.LogKey {
	k, err := eventstore.NewLogKey(bytes.Repeat([]byte("x"), eventstore.LogKeySize))
	require.NoError(t, err)
	return k
}

// A record published on the log subject by someone without the log key,
// however well chained, or a copy of a genuine record, stops the start
// naming its sequence and what is wrong: nothing is served.
func TestForeignRecordRefusesToStart(t *testing.T) {
	for name, key := range map[string]*eventstore.LogKey{"forged": otherKey(t), "replayed": nil} {
		t.Run(name, func(t *testing.T) {
			b := setupJetStream(t)
			b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
			last := b.lastSeq(t)
			dir := b.dir
			b.stop()
			servicetest.OnStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) { servicetest.Forge(t, ctx, js, key, "forger") })

			_, err := servicetest.TryStart(t, dir, servicetest.Options{})
			var ie *eventstore.IntegrityError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, last+1, ie.Seq)
			require.ErrorContains(t, err, fmt.Sprintf("log damaged at seq %d", last+1))
			if key != nil {
				require.Equal(t, eventstore.ProblemOtherKey, ie.Problem)
			} else {
				require.Equal(t, eventstore.ProblemRepeated, ie.Problem)
			}
		})
	}
}

// A foreign record appended while the service runs stops it: the writer's
// next append conflicts, and catching up on the log finds the record.
func TestForeignRecordStopsARunningService(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Config: handlers.Config{WriterID: "test-writer"}})
	b := bundleOf(st)
	b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	servicetest.Forge(t, ctx, b.jetstream(t), otherKey(t), "forger")
	r, err := b.tryCommand("goal.create", map[string]any{"title": "after"}, "after-forgery")
	require.True(t, err != nil || !r.OK, "a command after a forged record is not acknowledged: %+v", r)
	err = st.WaitEnded(t, 20*time.Second)
	var ie *eventstore.IntegrityError
	require.ErrorAs(t, err, &ie, "the service stops on the forged record")
	require.Equal(t, eventstore.ProblemOtherKey, ie.Problem)
}

// A start with another key than the log was written with refuses, naming
// both key ids.
func TestWrongLogKeyRefusesToStart(t *testing.T) {
	b := setupJetStream(t)
	b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
	last := b.lastSeq(t)
	dir := b.dir
	b.stop()
	_, err := servicetest.TryStart(t, dir, servicetest.Options{Config: handlers.Config{LogKey: bytes.Repeat([]byte("w"), eventstore.LogKeySize)}})
	var ie *eventstore.IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, eventstore.ProblemOtherKey, ie.Problem)
	require.Equal(t, last, ie.Seq, "found at the views' last record, before anything is written")
	require.ErrorContains(t, err, "every replica must hold the same log key")
}

// Damaged or missing views are rebuilt from the log on start, and serve the
// same state.
func TestDamagedViewsAreRebuiltOnStart(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, views string){
		"deleted": func(t *testing.T, views string) { require.NoError(t, os.RemoveAll(views)) },
		"flipped table bytes": func(t *testing.T, views string) {
			tables, err := filepath.Glob(filepath.Join(views, "*.sst"))
			require.NoError(t, err)
			require.NotEmpty(t, tables, "the views were flushed on close")
			for _, f := range tables {
				b, err := os.ReadFile(f)
				require.NoError(t, err)
				b[len(b)/2] ^= 0xff
				require.NoError(t, os.WriteFile(f, b, 0o600)) //nolint:gosec // a file of the test's own temp dir
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := setupJetStream(t)
			goal, _, seq := chain3(t, b)
			var before projections.GoalView
			b.query(t, "goal.get", schemas.Query{ID: goal}, seq, &before)
			dir := b.dir
			b.stop()
			damage(t, filepath.Join(dir, "views"))

			b2 := start(t, dir)
			var after projections.GoalView
			b2.query(t, "goal.get", schemas.Query{ID: goal}, seq, &after)
			require.Equal(t, before.Counts, after.Counts)
			require.Equal(t, before.Nodes, after.Nodes)
			b2.requireRebuildEqual(t)
		})
	}
}

// An operator can accept the verified prefix of a damaged log: the start
// names the commands lost after it, rebuilds the views from it and goes on;
// later starts verify the log through the acceptance, with no flag.
func TestAcceptVerifiedPrefixOfADamagedLog(t *testing.T) {
	b := setupJetStream(t)
	kept, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "kept"})
	dir := b.dir
	b.stop()
	servicetest.OnStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) {
		servicetest.Forge(t, ctx, js, otherKey(t), "forger")
	})
	_, err := servicetest.TryStart(t, dir, servicetest.Options{})
	require.ErrorIs(t, err, eventstore.ErrIntegrity)

	b2 := startWith(t, dir, handlers.Config{AcceptVerifiedPrefix: true})
	var ws []map[string]any
	b2.query(t, "workspace.list", schemas.Query{}, 0, &ws)
	for _, w := range ws {
		require.NotEqual(t, "evil", w["name"], "nothing of the forged record is served")
	}
	var g domain.Goal
	b2.query(t, "goal.get", schemas.Query{ID: kept.ID}, 0, &g)
	after, _ := b2.mustCommand(t, "goal.create", map[string]any{"title": "after"})
	b2.stop()

	b3 := start(t, dir) // no flag: the log verifies through the acceptance
	b3.query(t, "goal.get", schemas.Query{ID: after.ID}, 0, &g)
	v, err := eventstore.VerifyLog(context.Background(), b3.svc.Log(), b3.svc.LogKey(), nil)
	require.NoError(t, err)
	require.Nil(t, v.Damage)
	require.Equal(t, 1, v.Accepted)
}

// A log restored from a backup (or truncated by a fault) ends before the
// views: the start refuses, naming it; accepting the prefix names the
// commands the views had and the log lost.
func TestAcceptVerifiedPrefixOfATruncatedLog(t *testing.T) {
	b := setupJetStream(t)
	kept, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "kept"})
	dir := b.dir
	b.stop()
	backup := filepath.Join(t.TempDir(), "nats")
	require.NoError(t, os.CopyFS(backup, os.DirFS(filepath.Join(dir, "nats"))))
	b = start(t, dir)
	r := b.command(t, "goal.create", map[string]any{"title": "lost"}, "lost-goal")
	require.True(t, r.OK)
	b.stop()
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "nats")))
	require.NoError(t, os.CopyFS(filepath.Join(dir, "nats"), os.DirFS(backup)))

	_, err := servicetest.TryStart(t, dir, servicetest.Options{})
	var ie *eventstore.IntegrityError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, eventstore.ProblemTruncated, ie.Problem)

	var lost []string
	capture := &captureHandler{}
	b2 := startWith(t, dir, handlers.Config{AcceptVerifiedPrefix: true, Logger: slog.New(capture)})
	for _, rec := range capture.records() {
		if rec.Message == "handlers: acknowledged command lost" {
			rec.Attrs(func(a slog.Attr) bool {
				if a.Key == "command" {
					lost = append(lost, a.Value.String())
				}
				return true
			})
		}
	}
	require.Equal(t, []string{"default/lost-goal (by admin)"}, lost)
	var g domain.Goal
	b2.query(t, "goal.get", schemas.Query{ID: kept.ID}, 0, &g)
	rq := b2.request(t, "dwr.q.default.command.get", schemas.Query{ID: "lost-goal"}, nil)
	require.False(t, rq.OK, "the lost command is not known: %s", rq.Result)
	require.Equal(t, string(domain.CodeNotFound), rq.Error.Code)
}

func startWith(t *testing.T, dir string, cfg handlers.Config) *bundle {
	t.Helper()
	if cfg.WriterID == "" {
		cfg.WriterID = "test-writer"
	}
	st := servicetest.Start(t, dir, servicetest.Options{Config: cfg})
	return bundleOf(st)
}

// captureHandler keeps the log records of a service.
type captureHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }
func (h *captureHandler) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// A log written before the chain (records of format 1, no views of the new
// kind) is served after an upgrade: its records verify as the chain's
// beginning, the views are rebuilt from them, and new records chain on the
// last of them.
func TestLegacyLogIsUpgraded(t *testing.T) {
	old := setupJetStream(t)
	goal, _ := old.mustCommand(t, "goal.create", map[string]any{"title": "from before"})
	var legacy [][]byte
	require.NoError(t, old.svc.Log().Read(context.Background(), 1, func(_ uint64, rec []byte) error {
		c, err := eventstore.DecodeCommit(rec)
		require.NoError(t, err)
		events := make([]json.RawMessage, len(c.Events))
		for i := range c.Events {
			events[i] = c.Events[i].Raw
		}
		b, err := json.Marshal(map[string]any{"f": 1, "kind": c.Kind, "epoch": c.Epoch, "writer": c.Writer, "time": c.Time,
			"events": events, "results": c.Results})
		require.NoError(t, err)
		legacy = append(legacy, b)
		return nil
	}))
	old.stop()

	dir := t.TempDir()
	servicetest.OnStopped(t, dir, func(ctx context.Context, js jetstream.JetStream) {
		l, err := eventstore.NewJetStreamLog(ctx, js, eventstore.JetStreamConfig{})
		require.NoError(t, err)
		var last uint64
		for _, rec := range legacy {
			last, err = l.Append(ctx, rec, last)
			require.NoError(t, err)
		}
	})
	b := start(t, dir)
	var g domain.Goal
	b.query(t, "goal.get", schemas.Query{ID: goal.ID}, 0, &g)
	require.Equal(t, "from before", g.Title)
	after, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "after"})
	v, err := eventstore.VerifyLog(context.Background(), b.svc.Log(), b.svc.LogKey(), nil)
	require.NoError(t, err)
	require.Nil(t, v.Damage)
	require.Equal(t, len(legacy), v.Legacy)
	require.Equal(t, seq, v.Tip.Seq)
	require.Equal(t, uint64(len(legacy)+2), v.Tip.N, "positions count the legacy records (then an epoch and the goal)")
	b.stop()

	b = start(t, dir)
	b.query(t, "goal.get", schemas.Query{ID: after.ID}, 0, &g)
}
