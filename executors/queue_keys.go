package executors

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dwr-run/dwr/schemas"
	"github.com/dwr-run/dwr/schemas/seal"
)

// Work items the worker opens itself. With encryption on, the service
// seals an item's payloads (an execute item's task input, results,
// checkpoint and dependencies' results; a verify item's input and the
// result it judges) with its queue's key of the day, and the
// worker reads that key once a day with the queue.key query (only the
// queue's executors may), opening each item in memory: the job runs on
// the item alone, as with encryption off, instead of reading its task and
// each dependency again with task.get. An item that also carries payloads
// sealed with another key (a goal's own, which can be shredded alone), or
// whose key cannot be read (a service that does not hand queue keys, a
// shredded workspace), runs as before: from task.get.

// queueKeyRetry is how long a key the service did not hand is not asked
// for again: items run from task.get meanwhile.
const queueKeyRetry = time.Minute

// queueKeys are a worker's queue keys, by epoch.
type queueKeys struct {
	mu     sync.Mutex
	keys   map[int64]*seal.DataKey
	failed map[int64]time.Time // epochs whose key was not handed, and when
}

// openItem returns data, a work item of the worker's queue (an execute
// item, or a verifier's verify item), with its sealed payloads opened, or
// ok false when it holds one the worker cannot open itself.
func (w *Worker) openItem(ctx context.Context, data []byte) (plain []byte, ok bool) {
	scopes := seal.Scopes(data)
	keys := make(map[string]*seal.DataKey, len(scopes))
	for _, scope := range scopes {
		epoch, isQueue := seal.ParseQueueScope(scope)
		if !isQueue {
			return nil, false
		}
		k, err := w.queueKey(ctx, epoch)
		if err != nil {
			w.log.Debug("executors: an item's queue key cannot be read; reading its task instead", logErr, err)
			return nil, false
		}
		keys[scope] = k
	}
	plain, err := seal.OpenAll(data, w.cfg.Workspace, func(_, scope string) (*seal.DataKey, error) {
		return keys[scope], nil
	})
	if err != nil {
		w.log.Warn("executors: a work item does not open with its queue key; reading its task instead", logErr, err)
		return nil, false
	}
	return plain, true
}

// queueKey returns the queue's key of epoch: from memory, or read with
// queue.key (a refusal is remembered for queueKeyRetry).
func (w *Worker) queueKey(ctx context.Context, epoch int64) (*seal.DataKey, error) {
	qk := &w.queueKeys
	qk.mu.Lock()
	defer qk.mu.Unlock() // one read at a time: the others wait for it
	if k := qk.keys[epoch]; k != nil {
		return k, nil
	}
	if at, ok := qk.failed[epoch]; ok && time.Since(at) < queueKeyRetry {
		return nil, errors.New("executors: the queue key was not handed a moment ago")
	}
	k, err := w.readQueueKey(ctx, epoch)
	if err != nil {
		if qk.failed == nil {
			qk.failed = map[int64]time.Time{}
		}
		qk.failed[epoch] = time.Now()
		return nil, err
	}
	if qk.keys == nil {
		qk.keys = map[int64]*seal.DataKey{}
	}
	for e := range qk.keys { // a day's items are not sealed with an older day's key
		if e < epoch-1 {
			delete(qk.keys, e)
		}
	}
	qk.keys[epoch] = k
	return k, nil
}

func (w *Worker) readQueueKey(ctx context.Context, epoch int64) (*seal.DataKey, error) {
	r, err := w.c.query(ctx, "queue.key", schemas.Query{Queue: w.cfg.Queue, Epoch: epoch})
	if err != nil {
		return nil, err
	}
	if !r.OK {
		return nil, &CommandError{Command: "queue.key", Code: r.Error.Code, Message: r.Error.Message}
	}
	var res schemas.QueueKey
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return nil, fmt.Errorf("executors: queue.key: %w", err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(res.Key)
	if err != nil || res.Queue != w.cfg.Queue || res.Epoch != epoch {
		return nil, errors.New("executors: queue.key answered another key")
	}
	return seal.NewDataKey(raw)
}
