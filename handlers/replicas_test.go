package handlers_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// replicaKey is the log key every replica of a test holds.
var replicaKey = bytes.Repeat([]byte("k"), eventstore.LogKeySize)

// replica is one dwr service with its own views, on a shared NATS server.
type replica struct {
	store  *projections.Store
	svc    *handlers.Service
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, nc *nats.Conn, id string) *replica {
	t.Helper()
	return startReplicaWith(t, nc, handlers.Config{WriterID: id})
}

// startReplicaWith starts a replica with cfg, its lease, logger and log key
// those of every replica of the tests.
func startReplicaWith(t *testing.T, nc *nats.Conn, cfg handlers.Config) *replica {
	t.Helper()
	id := cfg.WriterID
	store, err := projections.Open(filepath.Join(t.TempDir(), "views"), projections.Options{})
	require.NoError(t, err)
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = time.Second
	}
	cfg.Logger, cfg.LogKey = testLogger(), replicaKey
	svc, err := handlers.New(nc, store, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{store: store, svc: svc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- svc.Run(ctx) }()
	select {
	case <-svc.Ready():
	case err := <-r.done:
		t.Fatalf("replica %s stopped: %v", id, err)
	case <-time.After(20 * time.Second):
		t.Fatalf("replica %s not ready", id)
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	require.NoError(t, <-r.done)
	r.cancel = nil
	require.NoError(t, r.store.Close())
}

// sharedServer starts a NATS server for replicas to share, stopped at
// cleanup, and returns a connection to it.
func sharedServer(t *testing.T) (*nats.Conn, *bundle) {
	t.Helper()
	_, nc := servicetest.StartNATS(t)
	return nc, &bundle{nc: nc, svcNC: nc, c: servicetest.NewClient(nc, "default")}
}

func TestStandbyTakesOverWhenTheWriterStops(t *testing.T) {
	nc, b := sharedServer(t)

	a := startReplica(t, nc, "writer-a")
	servicetest.Eventually(t, 10*time.Second, func() bool {
		r := b.command(t, "goal.create", map[string]any{"title": "first"}, "first")
		return r.OK
	})
	standby := startReplica(t, nc, "writer-b")

	// The standby's views follow the log.
	r := b.command(t, "goal.create", map[string]any{"title": "second"}, "second")
	require.True(t, r.OK)
	require.NoError(t, waitFor(standby.store, r.Seq))
	goals, err := standby.store.ListGoals("default", "", 0)
	require.NoError(t, err)
	require.Len(t, goals, 2)

	// The writer stops; the standby takes the lease and the writing.
	a.stop(t)
	start := time.Now()
	var third schemas.Reply
	servicetest.Eventually(t, 20*time.Second, func() bool {
		var err error
		third, err = b.tryCommand("goal.create", map[string]any{"title": "third"}, "third")
		return err == nil && third.OK
	})
	t.Logf("takeover in %s", time.Since(start).Round(time.Millisecond))
	var rep domain.Reply
	require.NoError(t, json.Unmarshal(third.Result, &rep))
	// A retry of a command the old writer committed still gets its first outcome.
	again := b.command(t, "goal.create", map[string]any{"title": "second"}, "second")
	require.True(t, again.OK)
	require.JSONEq(t, string(r.Result), string(again.Result))
	require.NoError(t, waitFor(standby.store, third.Seq))
	goals, err = standby.store.ListGoals("default", "", 0)
	require.NoError(t, err)
	require.Len(t, goals, 3)
}

func waitFor(s *projections.Store, seq uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.WaitFor(ctx, seq)
}

func TestFeedIsRepairedFromTheLog(t *testing.T) {
	b := setupJetStream(t)
	_, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "g"})
	js := b.jetstream(t)
	st, err := js.Stream(context.Background(), "DWR_EVENTS")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := st.Info(context.Background())
		return err == nil && info.State.Msgs >= 2
	})
	// Lose the feed entirely; a restart derives it again from the log.
	require.NoError(t, st.Purge(context.Background()))
	dir := b.dir
	b.stop()
	b2 := start(t, dir)
	st, err = b2.jetstream(t).Stream(context.Background(), "DWR_EVENTS")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		m, err := st.GetLastMsgForSubject(context.Background(), "dwr.*.>")
		if err != nil {
			return false
		}
		got, err := strconv.ParseUint(m.Header.Get(schemas.HeaderLogSeq), 10, 64)
		return err == nil && got >= seq
	})
}

// Events lost while the writer serves — here the feed's stream stops taking
// them for a while, as one whose node is down — are sent again from the log
// without a restart: the events after them are not stored out of order
// meanwhile, and the feed ends up holding every event once, in the log's
// order.
func TestFeedEventsLostWhileTheWriterServesAreSentAgain(t *testing.T) {
	b := setupJetStream(t)
	ctx := context.Background()
	_, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "before"})
	st, _ := feedAt(t, b, seq)
	js := b.jetstream(t)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	cfg := info.Config
	away := cfg
	away.Subjects, away.SubjectTransform = []string{"dwr.nowhere.>"}, nil
	_, err = js.UpdateStream(ctx, away)
	require.NoError(t, err)
	lost, _ := b.mustCommand(t, "goal.create", map[string]any{"title": "lost"})
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	after, last := b.mustCommand(t, "goal.create", map[string]any{"title": "after"})

	// Every goal's events, once each, in the log's order.
	var goals []string
	servicetest.Eventually(t, 20*time.Second, func() bool {
		goals = nil
		c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
		batch, err := c.FetchNoWait(1000)
		require.NoError(t, err)
		var prev uint64
		for m := range batch.Messages() {
			n, err := strconv.ParseUint(m.Headers().Get(schemas.HeaderLogSeq), 10, 64)
			require.NoError(t, err)
			require.GreaterOrEqual(t, n, prev, "the feed follows the log's order")
			prev = n
			var e struct {
				Type        string `json:"type"`
				AggregateID string `json:"agg_id"`
			}
			require.NoError(t, json.Unmarshal(m.Data(), &e))
			if e.Type == "goal.created" {
				goals = append(goals, e.AggregateID)
			}
		}
		return prev >= last
	}, func() string { return fmt.Sprintf("the feed's goals: %v", goals) })
	require.Len(t, goals, 3, "each goal once: %v", goals)
	require.Equal(t, []string{lost.ID, after.ID}, goals[1:])
}

// A feed stream deleted while the writer serves is made again and filled
// from the log, without a restart.
func TestAFeedDeletedWhileTheWriterServesIsMadeAgain(t *testing.T) {
	b := setupJetStream(t)
	ctx := context.Background()
	_, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "before"})
	st, _ := feedAt(t, b, seq)
	require.NoError(t, b.jetstream(t).DeleteStream(ctx, "DWR_EVENTS"))
	_, seq = b.mustCommand(t, "goal.create", map[string]any{"title": "after"})
	var n uint64
	servicetest.Eventually(t, 20*time.Second, func() bool {
		c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"dwr.evs.default.goal.created"}})
		if err != nil {
			return false
		}
		batch, err := c.FetchNoWait(100)
		if err != nil {
			return false
		}
		n = 0
		for range batch.Messages() {
			n++
		}
		return n == 2
	}, func() string { return fmt.Sprintf("the feed holds %d goals' creations", n) })
	feedAt(t, b, seq)
}

// feedAt waits until the event feed's last event came from log record seq
// and returns the feed's stream with its state then.
func feedAt(t *testing.T, b *bundle, seq uint64) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	ctx := context.Background()
	st, err := b.jetstream(t).Stream(ctx, "DWR_EVENTS")
	require.NoError(t, err)
	var info *jetstream.StreamInfo
	servicetest.Eventually(t, 10*time.Second, func() bool {
		m, err := st.GetLastMsgForSubject(ctx, "dwr.*.>")
		if err != nil || m.Header.Get(schemas.HeaderLogSeq) != strconv.FormatUint(seq, 10) {
			return false
		}
		info, err = st.Info(ctx)
		return err == nil
	})
	return st, info
}

// A record whose events reached the feed only in part (a crash between
// two publishes) is completed from the log at the next start: the feed then
// holds every event once.
func TestFeedResumesInsideARecordCutShort(t *testing.T) {
	b := setupJetStream(t)
	// A goal with its plan: one record of several events.
	_, seq := b.mustCommand(t, "goal.create", map[string]any{"title": "g",
		"tasks": []map[string]any{{"key": "a", "queue": "q"}, {"key": "b", "queue": "q", "depends_on": []string{"a"}}}})
	ctx := context.Background()
	st, info := feedAt(t, b, seq)
	want := int(info.State.Msgs)
	require.Greater(t, want, 3, "the record has several events")
	// Cut the record short: its last two events never reached the feed.
	last := info.State.LastSeq
	require.NoError(t, st.DeleteMsg(ctx, last))
	require.NoError(t, st.DeleteMsg(ctx, last-1))
	dir := b.dir
	b.stop()
	b2 := start(t, dir)
	st, err := b2.jetstream(t).Stream(ctx, "DWR_EVENTS")
	require.NoError(t, err)
	ids := func() map[string]int {
		seen := map[string]int{}
		c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
		batch, err := c.FetchNoWait(1000)
		require.NoError(t, err)
		for m := range batch.Messages() {
			var e struct {
				ID string `json:"id"`
			}
			require.NoError(t, json.Unmarshal(m.Data(), &e))
			seen[e.ID]++
		}
		return seen
	}
	var seen map[string]int
	servicetest.Eventually(t, 10*time.Second, func() bool {
		seen = ids()
		return len(seen) >= want
	}, func() string { return fmt.Sprintf("the feed holds %d distinct events, the log %d", len(seen), want) })
	for id, n := range seen {
		require.Equal(t, 1, n, "event %s is in the feed %d times", id, n)
	}
	require.Len(t, seen, want)
}

// The event feed keeps within its bound, dropping its oldest events, and a
// restart resumes it after its last event rather than publishing the log
// again.
func TestFeedKeepsWithinItsBound(t *testing.T) {
	dir := t.TempDir()
	cfg := handlers.Config{WriterID: "test-writer", FeedMaxBytes: 1 << 20}
	b := bundleOf(servicetest.Start(t, dir, servicetest.Options{Secure: true, Config: cfg}))
	description := strings.Repeat("d", 9_000)
	var seq uint64
	for i := range 150 { // ~1.4 MB of events
		_, seq = b.mustCommand(t, "goal.create", map[string]any{"title": fmt.Sprintf("g%d", i), "description": description})
	}
	ctx := context.Background()
	_, info := feedAt(t, b, seq)
	require.LessOrEqual(t, info.State.Bytes, uint64(1<<20), "within its bound")
	require.Greater(t, info.State.FirstSeq, uint64(1), "its oldest events dropped")
	last := info.State.LastSeq

	b.stop()
	b2 := bundleOf(servicetest.Start(t, dir, servicetest.Options{Secure: true, Config: cfg}))
	b2.mustCommand(t, "goal.create", map[string]any{"title": "after the restart"})
	st, err := b2.jetstream(t).Stream(ctx, "DWR_EVENTS")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err = st.Info(ctx)
		return err == nil && info.State.LastSeq > last
	})
	require.Equal(t, last+1, info.State.LastSeq, "the restart published the new goal's event only")
}

// A work item that passes its consumer's MaxDeliver while no writer runs is
// still quarantined: the advisory is kept in a stream until the next writer
// deals with it.
func TestAnItemPoisonedWhileNoWriterRunsIsQuarantinedByTheNextWriter(t *testing.T) {
	nc, b := sharedServer(t)

	a := startReplica(t, nc, "writer-a")
	var task domain.Reply
	servicetest.Eventually(t, 10*time.Second, func() bool {
		r := b.command(t, "task.create", map[string]any{"spec": map[string]any{"queue": "poison"}}, "poison-task")
		if r.OK {
			require.NoError(t, json.Unmarshal(r.Result, &task))
		}
		return r.OK
	})
	work, err := b.jetstream(t).Stream(context.Background(), "DWR_WORK")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := work.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	})
	a.stop(t)

	// With no writer, the item is delivered once, never acknowledged, and
	// passes MaxDeliver: the advisory is kept.
	q := b.queue(t, "poison", 100*time.Millisecond, 1)
	it, _ := q.next(5 * time.Second)
	require.Equal(t, task.ID, it.TaskID)
	adv, err := b.jetstream(t).Stream(context.Background(), "DWR_ADVISORIES")
	require.NoError(t, err)
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := adv.Info(context.Background())
		return err == nil && info.State.Msgs == 1
	})

	// The next writer quarantines the task and deletes the item.
	next := startReplica(t, nc, "writer-b")
	servicetest.Eventually(t, 20*time.Second, func() bool {
		got, err := next.store.Task(task.ID)
		return err == nil && got != nil && got.State == domain.StateFailed && got.Reason == domain.ReasonQuarantined
	})
	servicetest.Eventually(t, 10*time.Second, func() bool {
		info, err := work.Info(context.Background())
		advInfo, err2 := adv.Info(context.Background())
		return err == nil && err2 == nil && info.State.Msgs == 0 && advInfo.State.Msgs == 0
	})
}

// Each replica counts the artifacts every replica stores: a put one serves
// reaches the other's count through the object store's metadata, so that a
// workspace's bound holds whichever replica answers.
func TestEveryReplicaCountsTheArtifactsOfAll(t *testing.T) {
	nc, _ := sharedServer(t)
	const chunk = schemas.ArtifactChunkBytes
	cfg := func(id string) handlers.Config {
		return handlers.Config{WriterID: id, MaxArtifactBytesPerWorkspace: 3 * chunk}
	}
	replicas := []*replica{startReplicaWith(t, nc, cfg("a")), startReplicaWith(t, nc, cfg("b"))}
	c := servicetest.NewClient(nc, "default")
	put := func(i int) schemas.Reply {
		data := bytes.Repeat([]byte{byte(i)}, chunk)
		h := nats.Header{}
		h.Set(schemas.HeaderUpload, fmt.Sprintf("up%d", i))
		h.Set(schemas.HeaderChunk, "0")
		r := c.Request(t, "dwr.q.default.artifact.chunk", data, h)
		require.True(t, r.OK, "chunk of upload %d: %+v", i, r.Error)
		sum := sha256.Sum256(data)
		return c.Request(t, "dwr.q.default.artifact.put", schemas.ArtifactPut{Upload: fmt.Sprintf("up%d", i), Chunks: 1, Size: chunk,
			SHA256: hex.EncodeToString(sum[:])}, nil)
	}
	for i := range 3 {
		r := put(i)
		require.True(t, r.OK, "%+v", r.Error)
		servicetest.Eventually(t, 10*time.Second, func() bool {
			for _, r := range replicas {
				if stored, _ := r.svc.ArtifactBytes("default"); stored != int64(i+1)*chunk {
					return false
				}
			}
			return true
		}, func() string { return fmt.Sprintf("both replicas count %d artifacts", i+1) })
	}
	for i := 3; i < 6; i++ { // whichever replica answers
		r := put(i)
		require.False(t, r.OK)
		require.Equal(t, schemas.CodeTooLarge, r.Error.Code)
	}
}

// An upload another replica put no longer counts against its sender here:
// an identity's chunks and puts are each answered by any replica, and one
// whose count of uploads in progress was read before the others' puts
// must not refuse the next upload's chunk for them.
func TestAnUploadAnotherReplicaPutNoLongerCounts(t *testing.T) {
	nc, b := sharedServer(t)
	startReplica(t, nc, "a")
	c := servicetest.NewClient(nc, "default")
	chunk := func(upload string) schemas.Reply {
		h := nats.Header{}
		h.Set(schemas.HeaderUpload, upload)
		h.Set(schemas.HeaderChunk, "0")
		return c.Request(t, "dwr.q.default.artifact.chunk", []byte(upload), h)
	}
	uploads, err := b.jetstream(t).Stream(context.Background(), "DWR_UPLOADS")
	require.NoError(t, err)
	for i := range handlers.MaxUploadsPerIdentity {
		up := fmt.Sprintf("up%d", i)
		r := chunk(up)
		require.True(t, r.OK, "%+v", r.Error)
		// What another replica's put of it does: its chunks are dropped.
		require.NoError(t, uploads.Purge(context.Background(), jetstream.WithPurgeSubject("dwr.upload.default.*."+up)))
	}
	r := chunk("next")
	require.True(t, r.OK, "%+v", r.Error)

	// Uploads still in progress are counted as ever.
	for i := 1; i < handlers.MaxUploadsPerIdentity; i++ {
		require.True(t, chunk(fmt.Sprintf("more%d", i)).OK)
	}
	r = chunk("one-too-many")
	require.False(t, r.OK)
	require.Equal(t, schemas.CodeConflict, r.Error.Code)
}
