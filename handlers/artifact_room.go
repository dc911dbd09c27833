package handlers

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwr-run/dwr/schemas"
)

// DefaultMaxArtifactBytesPerWorkspace is the default bound of the bytes of
// one workspace's artifacts (Config's MaxArtifactBytesPerWorkspace): 10 GiB.
const DefaultMaxArtifactBytesPerWorkspace = 10 << 30

// ArtifactMinCharge is the least an artifact counts for against its
// workspace's bound, whatever its size: each artifact costs the store its
// metadata and the service its count (~100 bytes of memory), so that tiny
// artifacts too are bounded in number (160 Ki at the default bound).
const ArtifactMinCharge = 64 << 10

// charge is what an artifact of size bytes counts for.
func charge(size int64) int64 { return max(size, ArtifactMinCharge) }

// artifactRoom counts the bytes of each workspace's artifacts, so that one
// workspace's members cannot fill the store, and the disk, that every
// workspace shares. It follows the object store's metadata (the puts of
// every replica, the sweeper's removals) and holds the room of the puts
// under way on this replica, so that puts here are bounded exactly and
// those on other replicas up to the puts they have under way.
type artifactRoom struct {
	max   int64         // per workspace
	ready chan struct{} // closed once the store's metadata was read to its end
	once  sync.Once

	mu    sync.Mutex
	sizes map[string]map[[32]byte]int64 // workspace → digest → bytes
	used  map[string]int64              // workspace → bytes stored
	held  map[string]int64              // workspace → bytes of puts under way here
}

func newArtifactRoom(maxBytes int64) *artifactRoom {
	return &artifactRoom{max: maxBytes, ready: make(chan struct{}),
		sizes: map[string]map[[32]byte]int64{}, used: map[string]int64{}, held: map[string]int64{}}
}

// set records the object named name (<workspace>/<sha256>) as holding size
// bytes, or as gone. A name of another shape is not an artifact: ignored.
func (r *artifactRoom) set(name string, size int64, gone bool) {
	ws, sha, ok := strings.Cut(name, "/")
	var d [32]byte
	if !ok || !schemas.ValidSHA256(sha) {
		return
	}
	_, _ = hex.Decode(d[:], []byte(sha))
	r.mu.Lock()
	defer r.mu.Unlock()
	objs := r.sizes[ws]
	if objs == nil {
		if gone {
			return
		}
		objs = map[[32]byte]int64{}
		r.sizes[ws] = objs
	}
	if was, ok := objs[d]; ok {
		r.used[ws] -= charge(was)
	}
	if gone {
		delete(objs, d)
	} else {
		objs[d] = size
		r.used[ws] += charge(size)
	}
	if len(objs) == 0 {
		delete(r.sizes, ws)
		delete(r.used, ws)
	}
}

// collect reports what each workspace's artifacts count for, and the
// bound.
func (r *artifactRoom) collect(gauge func(*prometheus.Desc, float64, ...string)) {
	gauge(descArtifactBytesMax, float64(r.max))
	r.mu.Lock()
	defer r.mu.Unlock()
	for ws, n := range r.used {
		gauge(descArtifactBytes, float64(n), ws)
	}
}

// refuses returns hold's refusal of an artifact of size bytes in ws, as
// the room stands now, without taking any (nil on a nil room, or before
// the store's metadata was read).
func (r *artifactRoom) refuses(ws string, size int64) *schemas.Error {
	if r == nil || !r.isReady() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if charge(size) > r.free(ws) {
		return r.refusal(ws, size)
	}
	return nil
}

// isReady reports whether the store's metadata was read to its end.
func (r *artifactRoom) isReady() bool {
	select {
	case <-r.ready:
		return true
	default:
		return false
	}
}

// free is what ws may still store: its bound less its artifacts and the
// puts under way here (negative past it). r.mu is held.
func (r *artifactRoom) free(ws string) int64 { return r.max - r.used[ws] - r.held[ws] }

// hold takes the room of an artifact of size bytes in ws for a put under
// way, or refuses it (too_large, /size) when ws's artifacts and the puts
// under way would then pass the bound. done gives the room back once the
// put ended: stored names the object when it was stored, which then counts
// at once (before the store's metadata reaches the watcher).
func (r *artifactRoom) hold(ctx context.Context, ws string, size int64) (done func(stored string), werr *schemas.Error) {
	select {
	case <-r.ready:
	case <-ctx.Done():
		return nil, &schemas.Error{Code: schemas.CodeUnavailable,
			Message: "the artifacts' sizes are still being read (the service is starting): put again in a moment"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := charge(size)
	if c > r.free(ws) {
		return nil, r.refusal(ws, size)
	}
	r.held[ws] += c
	return func(stored string) {
		if stored != "" {
			r.set(stored, size, false)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.held[ws] -= c; r.held[ws] == 0 {
			delete(r.held, ws)
		}
	}, nil
}

// stage refuses a chunk of ws, whose uploads in progress hold staged
// bytes, when they hold more than its room and one artifact of spare
// bytes besides: what uploads wait to be put is bounded by what they could
// put. It does not wait for the store's metadata.
func (r *artifactRoom) stage(ws string, staged, spare int64) *schemas.Error {
	if !r.isReady() {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if staged <= max(r.free(ws), 0)+spare {
		return nil
	}
	return &schemas.Error{Code: schemas.CodeTooLarge, Message: fmt.Sprintf(
		"workspace %q's uploads in progress hold %d bytes, and its artifacts %d of the %d it may hold: put them, or let them be dropped an hour after their last chunk, before sending more (the bound is dwr serve --max-artifact-bytes-per-workspace)",
		ws, staged, r.used[ws], r.max)}
}

// refusal is the answer to a put of size bytes that ws has no room for. r.mu is held.
func (r *artifactRoom) refusal(ws string, size int64) *schemas.Error {
	storing := ""
	if h := r.held[ws]; h > 0 {
		storing = fmt.Sprintf(" (%d more being stored)", h)
	}
	w := invalidField("/size",
		"workspace %q holds %d bytes of artifacts%s, of the %d it may hold (each counts at least 64 KiB): this one's %d bytes would pass it. The artifacts a task made that no task names are removed once its goal has ended for dwr serve --artifact-retention; the bound is dwr serve --max-artifact-bytes-per-workspace",
		ws, r.used[ws], storing, r.max, size)
	w.Code = schemas.CodeTooLarge
	return w
}

// follow keeps r following obs's metadata until ctx ends, watching again
// after a pause whenever the watch ends (its connection closed).
func (r *artifactRoom) follow(ctx context.Context, obs jetstream.ObjectStore, logger *slog.Logger) {
	for ctx.Err() == nil {
		if err := r.watch(ctx, obs); err != nil && ctx.Err() == nil {
			logger.Warn("handlers: following the artifacts' sizes", "err", err)
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
}

// watch reads obs's metadata, every object's latest (a removed one's
// marker too), then each change as it is made, until ctx ends or the
// watch does.
func (r *artifactRoom) watch(ctx context.Context, obs jetstream.ObjectStore) error {
	w, err := obs.Watch(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case info, ok := <-w.Updates():
			switch {
			case !ok:
				return errors.New("the watch of the object store ended")
			case info == nil:
				r.once.Do(func() { close(r.ready) })
			default:
				r.set(info.Name, int64(info.Size), info.Deleted) //nolint:gosec // G115: an artifact's size is at most ArtifactMaxBytes
			}
		}
	}
}
