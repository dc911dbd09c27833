package client_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readArtifact(t *testing.T, cl *client.Client, sha string) ([]byte, error) {
	t.Helper()
	r, err := cl.GetArtifact(context.Background(), sha)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	return io.ReadAll(r)
}

// An artifact goes in chunk by chunk and comes back byte for byte, under
// the digest of its bytes; the same bytes again are not stored twice, and
// an empty artifact is an artifact too. So too with encryption on, which
// seals the chunks as they are stored.
func TestArtifactRoundTrip(t *testing.T) {
	t.Run("plain", func(t *testing.T) { artifactRoundTrip(t, handlers.Config{}) })
	t.Run("sealed", func(t *testing.T) {
		artifactRoundTrip(t, handlers.Config{Encryption: true, MasterKey: bytes.Repeat([]byte{9}, 32)})
	})
}

func artifactRoundTrip(t *testing.T, cfg handlers.Config) {
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true, Config: cfg})
	cl := client.New(svc.Admin, client.Workspace("default"))
	ctx := context.Background()
	for _, n := range []int{0, 1, schemas.ArtifactChunkBytes, 3*schemas.ArtifactChunkBytes + 17} {
		data := randomBytes(t, n)
		info, err := cl.PutArtifact(ctx, bytes.NewReader(data), client.ArtifactMeta{Name: "data.bin", Type: "application/octet-stream"})
		require.NoError(t, err, "%d bytes", n)
		require.Equal(t, digest(data), info.SHA256)
		require.Equal(t, int64(n), info.Size)
		require.Equal(t, "data.bin", info.Name)
		require.False(t, info.Duplicate)

		got, err := readArtifact(t, cl, info.SHA256)
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, got), "%d bytes come back as they went", n)

		again, err := cl.PutArtifact(ctx, bytes.NewReader(data), client.ArtifactMeta{Name: "copy.bin"})
		require.NoError(t, err)
		require.True(t, again.Duplicate, "the same bytes are stored once")
		require.Equal(t, "data.bin", again.Name, "the first put's name stays")

		stat, err := cl.ArtifactInfo(ctx, info.SHA256)
		require.NoError(t, err)
		require.Equal(t, int64(n), stat.Size)
	}
	_, err := cl.ArtifactInfo(ctx, digest([]byte("never stored")))
	require.ErrorIs(t, err, client.ErrNotFound)
	_, err = cl.GetArtifact(ctx, digest([]byte("never stored")))
	require.ErrorIs(t, err, client.ErrNotFound)
}

// A put whose chunks do not hold what it claims is refused with the field
// that is wrong, and stores nothing under the claimed digest.
func TestArtifactPutChecksTheChunks(t *testing.T) {
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true})
	cl := servicetest.NewClient(svc.Admin, "default")
	chunk := func(upload string, i int, data []byte) schemas.Reply {
		h := nats.Header{}
		h.Set(schemas.HeaderUpload, upload)
		h.Set(schemas.HeaderChunk, strconv.Itoa(i))
		return cl.Request(t, "dwr.q.default.artifact.chunk", data, h)
	}
	put := func(p schemas.ArtifactPut) schemas.Reply {
		return cl.Request(t, "dwr.q.default.artifact.put", p, nil)
	}
	a, b := []byte("first chunk "), []byte("second chunk")
	whole := append(append([]byte{}, a...), b...)
	require.True(t, chunk("up1", 0, a).OK)
	require.True(t, chunk("up1", 0, a).OK, "a chunk sent again is taken")

	r := put(schemas.ArtifactPut{Upload: "up1", Chunks: 2, Size: int64(len(whole)), SHA256: digest(whole)})
	requireField(t, r, "/chunks")
	require.True(t, chunk("up1", 1, b).OK)
	r = put(schemas.ArtifactPut{Upload: "up1", Chunks: 2, Size: int64(len(whole)) + 1, SHA256: digest(whole)})
	requireField(t, r, "/size")
	r = put(schemas.ArtifactPut{Upload: "up1", Chunks: 2, Size: int64(len(whole)), SHA256: digest([]byte("other"))})
	requireField(t, r, "/sha256")
	stat := cl.Request(t, "dwr.q.default.artifact.info", schemas.ArtifactGet{SHA256: digest([]byte("other"))}, nil)
	require.Equal(t, string(domain.CodeNotFound), stat.Error.Code, "nothing is stored under a digest the bytes do not have")

	require.True(t, chunk("up2", 1, b).OK)
	r = put(schemas.ArtifactPut{Upload: "up2", Chunks: 2, Size: int64(len(whole)), SHA256: digest(whole)})
	requireField(t, r, "/chunks")
	require.Contains(t, r.Error.Message, "chunk 0 of upload up2 is missing")

	for _, bad := range []schemas.ArtifactPut{
		{Upload: "no spaces", SHA256: digest(whole)},
		{Upload: "up3", SHA256: "ABC"},
		{Upload: "up3", SHA256: digest(whole), Size: 2 << 30},
	} {
		r := put(bad)
		require.False(t, r.OK, "%+v", bad)
		require.NotEmpty(t, r.Error.Fields, "%+v", bad)
	}
	r = chunk("up4", 0, make([]byte, schemas.ArtifactChunkBytes+1))
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeTooLarge), r.Error.Code)
}

func requireField(t *testing.T, r schemas.Reply, pointer string) {
	t.Helper()
	require.False(t, r.OK, "refused")
	require.Equal(t, string(domain.CodeInvalid), r.Error.Code, r.Error.Message)
	require.Len(t, r.Error.Fields, 1, r.Error.Message)
	require.Equal(t, pointer, r.Error.Fields[0].Pointer, r.Error.Message)
}

// An artifact whose stored bytes were changed is refused on read: the
// reader checks them against the digest it asked for.
func TestAnArtifactChangedInTheStoreIsRefusedOnRead(t *testing.T) {
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true})
	cl := client.New(svc.Admin, client.Workspace("default"))
	ctx := context.Background()
	data := randomBytes(t, 2*schemas.ArtifactChunkBytes+5)
	info, err := cl.PutArtifact(ctx, bytes.NewReader(data), client.ArtifactMeta{Name: "report.pdf"})
	require.NoError(t, err)

	// Whoever reaches the service's account (an operator, a bug) puts
	// other bytes under the artifact's name.
	js, err := jetstream.New(svc.Conn)
	require.NoError(t, err)
	obs, err := js.ObjectStore(ctx, "dwr-artifacts")
	require.NoError(t, err)
	stored, err := obs.GetBytes(ctx, "default/"+info.SHA256)
	require.NoError(t, err, "the service writes the object store's own format: nats.go reads it, checking its digest")
	require.Equal(t, data, stored)
	changed := bytes.Clone(data)
	changed[len(changed)/2] ^= 0xff
	_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: "default/" + info.SHA256,
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: schemas.ArtifactChunkBytes}}, bytes.NewReader(changed))
	require.NoError(t, err)

	_, err = readArtifact(t, cl, info.SHA256)
	require.ErrorIs(t, err, client.ErrArtifactCorrupt)
	file := filepath.Join(t.TempDir(), "report.pdf")
	require.ErrorIs(t, cl.SaveArtifact(ctx, info.SHA256, file), client.ErrArtifactCorrupt)
	require.NoFileExists(t, file, "no file holds bytes that failed the check")
	entries, err := os.ReadDir(filepath.Dir(file))
	require.NoError(t, err)
	require.Empty(t, entries, "nor the temporary one")
}

// A report naming an artifact its workspace does not hold is refused with
// the field named, and nothing is appended; one naming a stored artifact
// is recorded.
func TestAReportNamesOnlyStoredArtifacts(t *testing.T) {
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true})
	cl := client.New(svc.Admin, client.Workspace("default"))
	kit := servicetest.NewClient(svc.Admin, "default")
	ctx := context.Background()
	taskID := kit.CreateTask(t, map[string]any{"queue": "q"})
	var claim domain.Reply
	require.NoError(t, json.Unmarshal(kit.Command(t, "task.claim", map[string]any{"task_id": taskID, "executor": "test"}), &claim))
	token := claim.Token

	missing := digest([]byte("not uploaded"))
	before, err := svc.Svc.Log().LastSeq(ctx)
	require.NoError(t, err)
	r := kit.Request(t, "dwr.cmd.default.task.succeed", map[string]any{"task_id": taskID, "attempt": 1, "token": token,
		"result": map[string]any{"ok": true}, "artifacts": []schemas.ArtifactRef{{Name: "x", SHA256: missing}}}, nil)
	requireField(t, r, "/artifacts/0/sha256")
	r = kit.Request(t, "dwr.cmd.default.task.succeed", map[string]any{"task_id": taskID, "attempt": 1, "token": token,
		"result": map[string]any{"ok": true}, "model_steps": []schemas.ModelStep{{Model: "m", ResponseRef: "sha256:" + missing}}}, nil)
	requireField(t, r, "/model_steps/0/response_ref")
	after, err := svc.Svc.Log().LastSeq(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing appended")

	info, err := cl.PutArtifact(ctx, strings.NewReader("the report"), client.ArtifactMeta{Name: "report.txt", TaskID: taskID})
	require.NoError(t, err)
	ref := info.Ref()
	ref.Size++
	r = kit.Request(t, "dwr.cmd.default.task.succeed", map[string]any{"task_id": taskID, "attempt": 1, "token": token,
		"result": map[string]any{"ok": true}, "artifacts": []schemas.ArtifactRef{ref}}, nil)
	requireField(t, r, "/artifacts/0/size")
	kit.Command(t, "task.succeed", map[string]any{"task_id": taskID, "attempt": 1, "token": token,
		"result": map[string]any{"ok": true}, "artifacts": []schemas.ArtifactRef{info.Ref()},
		"model_steps": []schemas.ModelStep{{Model: "m", ResponseRef: "sha256:" + info.SHA256}}})
	task := kit.WaitState(t, taskID, "accepted", 10*time.Second)
	require.Equal(t, []schemas.ArtifactRef{info.Ref()}, task.Attempts[0].Artifacts)
}

// Who may read and make artifacts: a viewer reads, never stores; another
// workspace's member reaches neither; an executor does both in its own.
func TestArtifactPermissions(t *testing.T) {
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true})
	ctx := context.Background()
	servicetest.Must(t, svc.Admin, "other", "workspace.create", map[string]any{"name": "other"})
	admin := client.New(svc.Admin, client.Workspace("default"))
	info, err := admin.PutArtifact(ctx, strings.NewReader("secret plan"), client.ArtifactMeta{})
	require.NoError(t, err)

	viewer := client.New(svc.Member(t, "default", "vera", domain.RoleViewer), client.Workspace("default"), client.NoRetry())
	got, err := readArtifact(t, viewer, info.SHA256)
	require.NoError(t, err)
	require.Equal(t, "secret plan", string(got))
	_, err = viewer.PutArtifact(ctx, strings.NewReader("x"), client.ArtifactMeta{})
	require.ErrorIs(t, err, client.ErrForbidden)

	stranger := client.New(svc.Member(t, "other", "olga", domain.RoleClient), client.Workspace("default"),
		client.NoRetry(), client.Timeout(2*time.Second))
	_, err = stranger.GetArtifact(ctx, info.SHA256)
	require.ErrorIs(t, err, client.ErrForbidden)
	_, err = stranger.In("other").GetArtifact(ctx, info.SHA256)
	require.ErrorIs(t, err, client.ErrNotFound, "workspaces do not share artifacts")

	exec := client.New(svc.Member(t, "default", "ed", domain.RoleExecutor, "q"), client.Workspace("default"))
	mine, err := exec.PutArtifact(ctx, strings.NewReader("made by a job"), client.ArtifactMeta{})
	require.NoError(t, err)
	got, err = readArtifact(t, exec, mine.SHA256)
	require.NoError(t, err)
	require.Equal(t, "made by a job", string(got))

	// One identity cannot add chunks to another's upload: the chunks of
	// each are kept apart, so the put finds none of the other's.
	upload := "shared-upload"
	for i, nc := range []*nats.Conn{svc.Admin, exec.Conn()} {
		m := nats.NewMsg("dwr.q.default.artifact.chunk")
		m.Header.Set(schemas.HeaderUpload, upload)
		m.Header.Set(schemas.HeaderChunk, strconv.Itoa(i))
		m.Data = []byte("part")
		resp, err := nc.RequestMsg(m, 5*time.Second)
		require.NoError(t, err)
		require.Contains(t, string(resp.Data), `"ok":true`)
	}
	r := servicetest.NewClient(svc.Admin, "default").Request(t, "dwr.q.default.artifact.put",
		schemas.ArtifactPut{Upload: upload, Chunks: 2, Size: 8, SHA256: digest([]byte("partpart"))}, nil)
	requireField(t, r, "/chunks")
	require.True(t, errors.Is(r.Error, client.ErrInvalid))
}

// A large artifact streams both ways with flat memory: while 200 MiB go in
// and come back, the heap of the process — client and service — grows by a
// bound, whatever the size (44–56 MiB for 25 to 400 MiB), and the bytes
// that come back have its digest. Under the race detector, which slows it
// tenfold, it moves 8 MiB: the bound then proves little; run it without
// -race for the figure.
func TestALargeArtifactStreamsWithFlatMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 200 MiB")
	}
	size := 200 << 20
	if raceOn {
		size = 8 << 20
	}
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true})
	cl := client.New(svc.Admin, client.Workspace("default"))
	ctx := context.Background()

	// Collect often, so that the heap in use follows what is live rather
	// than the garbage collector's pace.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	src := &patternReader{left: size}
	began := time.Now()
	info, err := cl.PutArtifact(ctx, src, client.ArtifactMeta{Name: "big.bin"})
	put := time.Since(began)
	require.NoError(t, err)
	require.Equal(t, int64(size), info.Size)
	require.Equal(t, hex.EncodeToString(src.h.Sum(nil)), info.SHA256)

	r, err := cl.GetArtifact(ctx, info.SHA256)
	require.NoError(t, err)
	h := sha256.New()
	n, err := io.Copy(h, r)
	require.NoError(t, err, "the reader checked the digest at its end")
	require.Equal(t, int64(size), n)
	t.Logf("put %s, read %s", put.Round(time.Millisecond), (time.Since(began) - put).Round(time.Millisecond))
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("%d MiB round trip: heap in use %d MiB before, peak %d MiB (+%d MiB)", size>>20, base.HeapInuse>>20, peak.Load()>>20, grew>>20)
	require.Less(t, grew, int64(96<<20), "the heap grows by a bound, not by the artifact's size")
}

// patternReader yields left bytes of a cheap pattern, hashing them.
type patternReader struct {
	left int
	n    byte
	h    hash.Hash
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.h == nil {
		p.h = sha256.New()
	}
	if p.left == 0 {
		return 0, io.EOF
	}
	b = b[:min(len(b), p.left)]
	for i := range b {
		p.n = p.n*31 + 7
		b[i] = p.n
	}
	p.left -= len(b)
	p.h.Write(b)
	return len(b), nil
}

// Retention: once a goal has ended for longer than the retention, the
// artifacts its tasks made and no task names are removed; the ones a report
// names, those of a goal still open and those no task made are kept.
func TestUnreferencedArtifactsOfEndedGoalsAreSwept(t *testing.T) {
	clock := servicetest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true, Clock: clock,
		Config: handlers.Config{ArtifactRetention: 24 * time.Hour}})
	cl := client.New(svc.Admin, client.Workspace("default"))
	kit := servicetest.NewClient(svc.Admin, "default")
	ctx := context.Background()
	put := func(text, taskID string) schemas.ArtifactInfo {
		info, err := cl.PutArtifact(ctx, strings.NewReader(text), client.ArtifactMeta{Name: text, TaskID: taskID})
		require.NoError(t, err)
		return *info
	}
	goal := func(title string) (goalID, taskID string) {
		var r schemas.CommandResult
		require.NoError(t, json.Unmarshal(kit.Command(t, "goal.create", map[string]any{"title": title,
			"tasks": []map[string]any{{"key": "only", "queue": "q"}}}), &r))
		return r.ID, r.Tasks[0].TaskID
	}
	_, done := goal("ends")
	_, open := goal("stays open")
	var claim domain.Reply
	require.NoError(t, json.Unmarshal(kit.Command(t, "task.claim", map[string]any{"task_id": done, "executor": "test"}), &claim))
	reported := put("reported", done)
	dropped := put("made, never reported", done)
	ownerless := put("put by hand", "")
	pending := put("made by an open goal's task", open)
	kit.Command(t, "task.succeed", map[string]any{"task_id": done, "attempt": 1, "token": claim.Token, "result": "ok",
		"artifacts": []schemas.ArtifactRef{reported.Ref()}})
	kit.WaitState(t, done, "accepted", 10*time.Second)

	swept, err := svc.Svc.SweepArtifacts(ctx)
	require.NoError(t, err)
	require.Empty(t, swept, "within the retention nothing goes")

	clock.Advance(25 * time.Hour)
	swept, err = svc.Svc.SweepArtifacts(ctx)
	require.NoError(t, err)
	require.Len(t, swept, 1)
	require.Equal(t, dropped.SHA256, swept[0].SHA256)
	_, err = cl.ArtifactInfo(ctx, dropped.SHA256)
	require.ErrorIs(t, err, client.ErrNotFound)
	for _, kept := range []schemas.ArtifactInfo{reported, ownerless, pending} {
		_, err := cl.ArtifactInfo(ctx, kept.SHA256)
		require.NoError(t, err, "%s is kept", kept.Name)
	}
}

// One identity may have MaxUploadsPerIdentity uploads in progress in a
// workspace: the first chunk of one more is refused until one is put;
// another identity is not held back.
func TestUploadsInProgressAreBoundedPerIdentity(t *testing.T) {
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true})
	cl := servicetest.NewClient(svc.Admin, "default")
	chunk := func(c *servicetest.Client, upload string, i int) schemas.Reply {
		h := nats.Header{}
		h.Set(schemas.HeaderUpload, upload)
		h.Set(schemas.HeaderChunk, strconv.Itoa(i))
		return c.Request(t, "dwr.q.default.artifact.chunk", []byte("part"), h)
	}
	for i := range handlers.MaxUploadsPerIdentity {
		require.True(t, chunk(cl, "up"+strconv.Itoa(i), 0).OK)
	}
	r := chunk(cl, "one-more", 0)
	require.False(t, r.OK)
	require.Equal(t, string(domain.CodeConflict), r.Error.Code)
	require.Contains(t, r.Error.Message, "uploads of yours are in progress")
	require.True(t, chunk(cl, "up0", 1).OK, "an upload in progress goes on")
	require.False(t, chunk(cl, "no-first-chunk", 3).OK, "an upload that leaves out its first chunk is counted too")

	other := servicetest.NewClient(svc.Member(t, "default", "exec", domain.RoleExecutor, "q"), "default")
	require.True(t, chunk(other, "one-more", 0).OK, "another identity is not held back")

	p := cl.Request(t, "dwr.q.default.artifact.put", schemas.ArtifactPut{Upload: "up0", Chunks: 2, Size: 8, SHA256: digest([]byte("partpart"))}, nil)
	require.True(t, p.OK, "%+v", p.Error)
	require.True(t, chunk(cl, "one-more", 0).OK, "a put makes room")
}

// An artifact's chunks — read back by its put, and by a download — come in
// on the service's queries' connection, not on the one that carries the
// writer's appends and the commands: a viewer downloading a large artifact
// adds nothing to what the writer's connection receives.
func TestArtifactChunksAreReadOnTheQueriesConnection(t *testing.T) {
	const size = 16 << 20
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true})
	cl := client.New(svc.Admin, client.Workspace("default"))
	ctx := context.Background()

	main, queries := svc.BytesTo(t, "dwr-serve"), svc.BytesTo(t, "dwr-serve (queries)")
	info, err := cl.PutArtifact(ctx, &patternReader{left: size}, client.ArtifactMeta{Name: "big.bin"})
	require.NoError(t, err)
	r, err := cl.GetArtifact(ctx, info.SHA256)
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, r)
	require.NoError(t, err)
	require.Equal(t, int64(size), n)

	toMain, toQueries := svc.BytesTo(t, "dwr-serve")-main, svc.BytesTo(t, "dwr-serve (queries)")-queries
	t.Logf("%d MiB put and read back: %d KiB to the service's connection, %d MiB to the queries'", size>>20, toMain>>10, toQueries>>20)
	// The queries' connection takes the upload's chunks as requests, and
	// every read of them: the put's and the download's (before: 16 MiB to
	// the queries', 48 MiB to the service's connection).
	require.Greater(t, toQueries, int64(3*size))
	require.Less(t, toMain, int64(size/8), "no chunk came in on the writer's connection")
}

// The bytes of one workspace's artifacts are bounded, so that one
// workspace's members cannot fill the store, and the disk, that every
// workspace shares: a put past the bound is refused (too_large, /size),
// naming the bound, and stores nothing; bytes the workspace holds already
// are still put (nothing more is stored); another workspace has room of
// its own; a restarted service counts what the store holds; and the
// sweeper's removals make room again.
func TestAWorkspaceCannotFillTheArtifactStore(t *testing.T) {
	const chunk = schemas.ArtifactChunkBytes
	clock := servicetest.NewClock(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	dir := t.TempDir()
	opts := servicetest.Options{Secure: true, Clock: clock,
		Config: handlers.Config{ArtifactRetention: 24 * time.Hour, MaxArtifactBytesPerWorkspace: 3 * chunk, Metrics: handlers.NewMetricsRegistry()}}
	svc := servicetest.Start(t, dir, opts)
	ctx := context.Background()
	kit := servicetest.NewClient(svc.Admin, "default")
	var r schemas.CommandResult
	require.NoError(t, json.Unmarshal(kit.Command(t, "goal.create", map[string]any{"title": "makes a draft",
		"tasks": []map[string]any{{"key": "only", "queue": "q"}}}), &r))
	taskID := r.Tasks[0].TaskID
	var claim domain.Reply
	require.NoError(t, json.Unmarshal(kit.Command(t, "task.claim", map[string]any{"task_id": taskID, "executor": "test"}), &claim))

	member := client.New(svc.Member(t, "default", "writer", domain.RoleClient), client.Workspace("default"))
	put := func(cl *client.Client, data []byte, taskID string) (*schemas.ArtifactInfo, error) {
		return cl.PutArtifact(ctx, bytes.NewReader(data), client.ArtifactMeta{Name: "data.bin", TaskID: taskID})
	}
	draft := randomBytes(t, 2*chunk)
	_, err := put(member, draft, taskID)
	require.NoError(t, err)
	m := servicetest.ScrapeHandler(t, svc.Svc.Metrics())
	used, _ := m.Value("dwr_artifact_bytes", "workspace", "default")
	most, _ := m.Value("dwr_artifact_bytes_max")
	require.Equal(t, []float64{2 * chunk, 3 * chunk}, []float64{used, most}, "the metrics tell the workspace's bytes and the bound")
	tooMany := randomBytes(t, 2*chunk)
	refused := func(cl *client.Client, data []byte) {
		t.Helper()
		_, err := put(cl, data, "")
		require.ErrorIs(t, err, client.ErrTooLarge)
		var werr *schemas.Error
		require.ErrorAs(t, err, &werr)
		require.Equal(t, "/size", werr.Fields[0].Pointer)
		require.Contains(t, werr.Message, "--max-artifact-bytes-per-workspace")
		_, err = member.ArtifactInfo(ctx, digest(data))
		require.ErrorIs(t, err, client.ErrNotFound, "nothing was stored")
	}
	refused(member, tooMany)
	info, err := put(member, draft, "")
	require.NoError(t, err, "bytes the workspace holds are put again: nothing more is stored")
	require.True(t, info.Duplicate)
	_, err = put(member, randomBytes(t, chunk), "")
	require.NoError(t, err, "up to the bound")
	refused(member, []byte("one byte more"))

	servicetest.Must(t, svc.Admin, "other", "workspace.create", map[string]any{"name": "other"})
	other := client.New(svc.Admin, client.Workspace("other"))
	_, err = put(other, tooMany, "")
	require.NoError(t, err, "another workspace has room of its own")
	var stored atomic.Int32
	var wg sync.WaitGroup
	for range handlers.MaxUploadsPerIdentity {
		wg.Go(func() {
			if _, err := put(other, randomBytes(t, chunk), ""); err == nil {
				stored.Add(1)
			} else {
				assert.ErrorIs(t, err, client.ErrTooLarge)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int32(1), stored.Load(), "puts at once take the last room once")

	// Each artifact counts at least handlers.ArtifactMinCharge: tiny ones
	// are bounded in number too.
	servicetest.Must(t, svc.Admin, "tiny", "workspace.create", map[string]any{"name": "tiny"})
	tiny := client.New(svc.Admin, client.Workspace("tiny"))
	for i := range 3 * chunk / handlers.ArtifactMinCharge {
		_, err := put(tiny, []byte(strconv.Itoa(i)), "")
		require.NoError(t, err, "tiny artifact %d", i)
	}
	_, err = put(tiny, []byte("one more"), "")
	require.ErrorIs(t, err, client.ErrTooLarge)

	svc.Stop()
	opts.Config.Metrics = handlers.NewMetricsRegistry() // the stopped service's holds its collectors
	svc = servicetest.Start(t, dir, opts)
	member = client.New(svc.Member(t, "default", "writer-2", domain.RoleClient), client.Workspace("default"))
	refused(member, tooMany)

	kit = servicetest.NewClient(svc.Admin, "default")
	kit.Command(t, "task.succeed", map[string]any{"task_id": taskID, "attempt": 1, "token": claim.Token, "result": "ok"})
	kit.WaitState(t, taskID, "accepted", 10*time.Second)
	clock.Advance(25 * time.Hour)
	swept, err := svc.Svc.SweepArtifacts(ctx)
	require.NoError(t, err)
	require.Len(t, swept, 1, "the draft no task names")
	require.Eventually(t, func() bool {
		_, err := put(member, tooMany, "")
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the sweeper's removal makes room")
}

// What a workspace's uploads in progress hold is bounded by its room for
// artifacts and one artifact besides (each chunk counted whole): past it,
// any identity's next chunk is refused until uploads are put (or dropped),
// so that many identities cannot keep the disk full of uploads they never
// put.
func TestUploadsInProgressAreBoundedByTheWorkspacesRoom(t *testing.T) {
	const chunk = schemas.ArtifactChunkBytes
	svc := servicetest.Start(t, "", servicetest.Options{Secure: true,
		Config: handlers.Config{ArtifactMaxBytes: chunk, MaxArtifactBytesPerWorkspace: 2 * chunk}})
	send := func(c *servicetest.Client, upload string) schemas.Reply {
		h := nats.Header{}
		h.Set(schemas.HeaderUpload, upload)
		h.Set(schemas.HeaderChunk, "0")
		return c.Request(t, "dwr.q.default.artifact.chunk", []byte("part"), h)
	}
	cl := servicetest.NewClient(svc.Admin, "default")
	other := servicetest.NewClient(svc.Member(t, "default", "other", domain.RoleClient), "default")
	for i := range 4 { // room for two chunks, and one besides: the fourth is sent past it
		r := send(cl, "up"+strconv.Itoa(i))
		require.True(t, r.OK, "%d: %+v", i, r.Error)
	}
	r := send(other, "mine")
	require.False(t, r.OK, "the workspace's uploads in progress hold more than its room")
	require.Equal(t, schemas.CodeTooLarge, r.Error.Code)
	require.Contains(t, r.Error.Message, "uploads in progress")

	for i := range 4 {
		p := cl.Request(t, "dwr.q.default.artifact.put", schemas.ArtifactPut{Upload: "up" + strconv.Itoa(i), Chunks: 1, Size: 4, SHA256: digest([]byte("part"))}, nil)
		require.True(t, p.OK, "%+v", p.Error) // one artifact: the three others are duplicates
	}
	r = send(other, "mine")
	require.True(t, r.OK, "puts made room: %+v", r.Error)
}

// An upload's chunks are checked against what the service knows of the
// workspace's uploads in progress, read from JetStream at most once a
// second: JetStream keeps the info requests of the whole server in one
// queue (the service's own reads wait in it too), and each chunk asked one.
func TestAnUploadsChunksAreNotEachReadFromJetStream(t *testing.T) {
	svc := servicetest.Start(t, "", servicetest.Options{})
	var reads atomic.Int64
	sub, err := svc.Admin.Subscribe("$JS.API.STREAM.INFO.DWR_UPLOADS", func(*nats.Msg) { reads.Add(1) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, svc.Admin.Flush())
	const chunks = 40
	began := time.Now()
	_, err = client.New(svc.Admin, client.Workspace("default")).PutArtifact(context.Background(),
		bytes.NewReader(randomBytes(t, chunks*schemas.ArtifactChunkBytes)), client.ArtifactMeta{Name: "big"})
	require.NoError(t, err)
	most := int64(time.Since(began)/time.Second) + 2
	require.LessOrEqual(t, reads.Load(), most, "one read a second, not one a chunk (%d chunks)", chunks)
}
