package handlers

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// An attempt is a capability (DESIGN, "The trust boundary"). Its claim
// returns a token that every later command of the attempt must carry, and
// only the identity that claimed may use it; the domain checks both against
// what the claim recorded: the token's SHA-256 and the claimer. This file is
// the service's half: it makes the tokens, knows when each running attempt
// was last alive (without an event: heartbeats never become events), knows
// each queue's lease, and counts what it refuses.

// TokenKeyBytes is the size of the key attempt tokens are derived with.
const TokenKeyBytes = 32

// tokenKeyName is the key of the KV bucket <prefix>-keys that holds the
// token key when Config.TokenKey is not given.
const tokenKeyName = "attempt-token"

// tokenKey returns the key attempt tokens are derived with: Config.TokenKey,
// or the one kept in the service's KV bucket <prefix>-keys, made (from
// crypto/rand) by the first service to need it. Every replica and every
// restart derives the same tokens, so that a claim retried across a restart
// or a change of writer is answered with the token it was first given.
func tokenKey(ctx context.Context, js jetstream.JetStream, cfg Config) ([]byte, error) {
	if len(cfg.TokenKey) > 0 {
		return cfg.TokenKey, nil
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.Prefix + "-keys", Description: "dwr service secrets: the key attempt tokens are derived with. Service only.",
		History: 1, Replicas: cfg.Replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("handlers: keys bucket: %w", err)
	}
	e, err := kv.Get(ctx, tokenKeyName)
	if err == nil {
		if len(e.Value()) < TokenKeyBytes {
			return nil, fmt.Errorf("handlers: the attempt token key in bucket %s-keys is %d bytes; want %d", cfg.Prefix, len(e.Value()), TokenKeyBytes)
		}
		return e.Value(), nil
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("handlers: read the attempt token key: %w", err)
	}
	key := make([]byte, TokenKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if _, err := kv.Create(ctx, tokenKeyName, key); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("handlers: store the attempt token key: %w", err)
		}
		// Another replica made it first: use that one.
		if e, err = kv.Get(ctx, tokenKeyName); err != nil {
			return nil, fmt.Errorf("handlers: read the attempt token key: %w", err)
		}
		return e.Value(), nil
	}
	return key, nil
}

// attemptToken returns the token of the attempt a claim starts: an HMAC
// under the token key of the claim's identity — its workspace, its sender,
// its command id and its task — so that a retry of the claim (same id, same
// sender) is answered with the same token and no token is ever stored. It is
// 43 characters of unpadded base64url (256 bits).
func attemptToken(key []byte, ws, actor, commandID, taskID string) string {
	m := hmac.New(sha256.New, key)
	var n [binary.MaxVarintLen64]byte
	for _, part := range []string{"dwr attempt token v1", ws, actor, commandID, taskID} {
		m.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		m.Write([]byte(part))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// withToken returns a claim's reply with the attempt's token added, when
// the reply names the attempt that token belongs to: its hash is there, in
// the reply's token_hash or its task (a claim that started no attempt gets
// none). The token is the
// object's first member; the rest is the reply as stored.
func withToken(reply json.RawMessage, token string) json.RawMessage {
	if len(reply) < 2 || reply[0] != '{' || !bytes.Contains(reply, []byte(domain.TokenHash(token))) {
		return reply
	}
	out := make([]byte, 0, len(reply)+len(token)+12)
	out = append(out, `{"token":"`...)
	out = append(out, token...)
	out = append(out, `",`...)
	return append(out, reply[1:]...)
}

// liveness is the writer's memory of when each running attempt was last
// heard from: its heartbeats and checkpoints (its claim is its start time,
// in the views). It is never written anywhere. A new writer starts from
// nothing and counts every running attempt alive at its takeover.
type liveness struct {
	takeover time.Time

	mu    sync.Mutex
	last  map[attemptRef]time.Time
	marks int // since the last prune
}

type attemptRef struct {
	task string
	n    int
}

func newLiveness(takeover time.Time) *liveness {
	return &liveness{takeover: takeover, last: map[attemptRef]time.Time{}}
}

// pruneEvery is how many marks pass between two prunes of the attempts that
// no longer run.
const pruneEvery = 4096

// mark records that attempt n of task was alive at t. running reports
// whether an attempt still runs, for the prune that now and then forgets
// the ones that ended.
func (l *liveness) mark(task string, n int, t time.Time, running func(attemptRef) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := attemptRef{task, n}
	if t.After(l.last[k]) {
		l.last[k] = t
	}
	if l.marks++; l.marks < pruneEvery {
		return
	}
	l.marks = 0
	for k := range l.last {
		if !running(k) {
			delete(l.last, k)
		}
	}
}

// lastAlive returns when attempt n of task, started at started, was last
// heard from: its start, its last checkpoint or heartbeat, or this writer's
// takeover, whichever is latest.
func (l *liveness) lastAlive(task string, n int, started time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.takeover
	if started.After(t) {
		t = started
	}
	if hb := l.last[attemptRef{task, n}]; hb.After(t) {
		t = hb
	}
	return t
}

// leases caches each queue's lease: the ack wait of its work consumer, which
// a worker may change (Reconfigure), so it is read again after leaseTTL.
type leases struct {
	mu sync.Mutex
	m  map[string]cachedLease
}

type cachedLease struct {
	d  time.Duration
	at time.Time
}

const leaseTTL = 30 * time.Second

// queueLease returns the lease of queue in workspace ws: the AckWait of its
// consumer <prefix>-<ws>-<queue> on the work stream, or Config.DefaultLease
// when the queue has no such consumer.
func (s *Service) queueLease(ctx context.Context, ws, queue string) (time.Duration, error) {
	k := ws + "/" + queue
	now := time.Now()
	s.leases.mu.Lock()
	c, ok := s.leases.m[k]
	s.leases.mu.Unlock()
	if ok && now.Sub(c.at) < leaseTTL {
		return c.d, nil
	}
	d := s.cfg.DefaultLease
	cons, err := s.js.Consumer(ctx, s.dispatch.stream, s.cfg.Prefix+"-"+ws+"-"+queue)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
	case err != nil:
		return 0, err
	default:
		if w := cons.CachedInfo().Config.AckWait; w > 0 {
			d = w
		}
	}
	s.leases.mu.Lock()
	if s.leases.m == nil {
		s.leases.m = map[string]cachedLease{}
	}
	s.leases.m[k] = cachedLease{d: d, at: now}
	s.leases.mu.Unlock()
	return d, nil
}

// prepareClaim gives a claim what only the service knows: the hash of the
// token it derives for the claim, and, when the claim supersedes an attempt,
// the moment that attempt's lease lapses — its last sign of life plus its
// queue's lease and Config.LeaseGrace. It returns the token.
func (s *Service) prepareClaim(ctx context.Context, c *domain.ClaimTask, m domain.Meta, alive *liveness) (string, error) {
	token := attemptToken(s.tokenKey, m.Workspace, m.Actor, m.CommandID, c.TaskID)
	c.TokenHash = domain.TokenHash(token)
	if c.Supersedes <= 0 || alive == nil {
		return token, nil
	}
	if err := s.waitAnswered(ctx); err != nil {
		return "", err
	}
	t, err := s.store.Task(c.TaskID)
	if err != nil || t == nil || t.Workspace != m.Workspace {
		return token, err // the domain refuses it
	}
	a := t.Attempt(c.Supersedes)
	if a == nil || a.State != domain.AttemptStateRunning {
		return token, nil // not running: the domain refuses it, or it ended meanwhile
	}
	lease, err := s.queueLease(ctx, m.Workspace, t.Spec.Queue)
	if err != nil {
		return "", &schemas.Error{Code: schemas.CodeUnavailable,
			Message: "the queue's lease cannot be read right now: retry with the same command id"}
	}
	c.SupersedeAfter = alive.lastAlive(t.ID, a.N, a.StartedAt).Add(lease + s.cfg.LeaseGrace)
	return token, nil
}

// prepareReport gives a report what only the service knows, and returns
// the token of the attempt it may be handed ("" when it does not ask for
// the handoff). The claim a report carries (the lazy claim: the report
// starts its attempt and ends it in one commit) gets the hash of the token
// the service derives for it, exactly as prepareClaim does for a claim with
// the report's command id; that token is never handed out: the attempt has
// ended by the time anyone could use it. A report that asks for the
// handoff gets the hash of the token of the attempt it may be handed
// (handoff.go). Any other command is left as it is.
func (s *Service) prepareReport(cmd domain.Command, m domain.Meta) (nextToken string) {
	r, ok := domain.Report(cmd)
	if !ok {
		return ""
	}
	if r.Claim != nil {
		r.Claim.TokenHash = domain.TokenHash(attemptToken(s.tokenKey, m.Workspace, m.Actor, m.CommandID, r.TaskID))
	}
	if !r.Next {
		return ""
	}
	nextToken = attemptToken(s.tokenKey, m.Workspace, m.Actor, m.CommandID, "next:"+r.TaskID)
	*r.NextTokenHash = domain.TokenHash(nextToken)
	return nextToken
}

// heartbeat answers a task.heartbeat from the views and the writer's
// memory: the attempt is alive if the domain finds the heartbeat is its
// holder's. Nothing is appended.
func (s *Service) heartbeat(ctx context.Context, c *domain.Heartbeat, m domain.Meta, alive *liveness) outcome {
	if alive == nil {
		return outcome{Err: errNotWriter}
	}
	// A heartbeat right after its claim finds the attempt.
	if err := s.waitAnswered(ctx); err != nil {
		return outcome{Err: err}
	}
	m.Now = s.cfg.Clock().UTC().Round(0)
	m.CommandID = "" // a heartbeat is not a command to remember
	out, err := domain.Execute(s.store, c, m)
	if err != nil {
		return outcome{Err: err}
	}
	alive.mark(c.TaskID, c.Attempt, m.Now, s.running)
	reply, err := json.Marshal(out.Reply)
	if err != nil {
		return outcome{Err: err}
	}
	return outcome{Seq: s.store.Checkpoint(), Reply: reply}
}

// waitAnswered waits until the views reflect every command the writer has
// answered.
func (s *Service) waitAnswered(ctx context.Context) error {
	seq := s.answeredSeq()
	if seq == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.MinSeqWait)
	defer cancel()
	if err := s.store.WaitFor(wctx, seq); err != nil {
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "the views are behind the writer: retry shortly"}
	}
	return nil
}

// running reports whether attempt a still runs, as the views have it.
func (s *Service) running(a attemptRef) bool {
	t, err := s.store.Task(a.task)
	if err != nil || t == nil {
		return err != nil // keep it when in doubt
	}
	r := t.Running()
	return r != nil && r.N == a.n
}

// refusals counts the commands of attempts that were refused, by reason.
type refusals struct {
	mu sync.Mutex
	m  map[string]uint64
}

// Reasons a refusal is counted under (Service.Refused), beyond the
// domain's RefusedToken, RefusedClaimer and RefusedLeaseHeld.
const (
	// RefusedStale: a command of an attempt that no longer runs (fencing).
	RefusedStale = "stale_attempt"
)

// Refused returns how many commands of attempts this service refused since
// it started, by reason: bad_token (no token, or not the attempt's),
// not_claimer (another identity than the claimer), lease_held (a claim
// superseding an attempt alive within its lease), stale_attempt (an attempt
// that no longer runs). None of them appended anything or kept a result.
func (s *Service) Refused() map[string]uint64 {
	s.refused.mu.Lock()
	defer s.refused.mu.Unlock()
	out := make(map[string]uint64, len(s.refused.m))
	for k, v := range s.refused.m {
		out[k] = v
	}
	return out
}

// attemptCommands are the commands that an attempt sends, or that start
// one: their refusals are counted.
var attemptCommands = map[string]bool{"task.claim": true, "task.checkpoint": true, "task.succeed": true, "task.fail": true,
	"task.wait": true, "task.request_approval": true, "task.heartbeat": true, "task.delegate": true}

// countRefusal counts err if it refuses a command of an attempt (or a claim
// that would supersede one), and logs it.
func (s *Service) countRefusal(name string, m domain.Meta, err error) {
	if !attemptCommands[name] {
		return
	}
	reason := refusalReason(err)
	if reason == "" {
		return
	}
	s.refused.mu.Lock()
	if s.refused.m == nil {
		s.refused.m = map[string]uint64{}
	}
	s.refused.m[reason]++
	s.refused.mu.Unlock()
	s.cfg.Logger.Info("handlers: a command of an attempt was refused", "command", name, "reason", reason,
		"actor", m.Actor, "workspace", m.Workspace, "command_id", m.CommandID)
}

// refusalReason returns the reason err refuses a command of an attempt, or
// "" when it is no such refusal.
func refusalReason(err error) string {
	var de *domain.Error
	var se *schemas.Error
	switch {
	case errors.As(err, &de) && de.Field == "/token":
		reason, _, _ := strings.Cut(de.Message, ":")
		return reason
	case errors.As(err, &de) && de.Field == "/supersedes" && de.Code == domain.CodeConflict:
		return domain.RefusedLeaseHeld
	case errors.As(err, &de) && de.Field == "/attempt" && de.Code == domain.CodeConflict:
		return RefusedStale
	case errors.As(err, &se):
		for _, f := range se.Fields {
			if f.Pointer == "/token" {
				return domain.RefusedToken
			}
		}
	}
	return ""
}
