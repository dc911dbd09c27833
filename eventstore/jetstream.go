package eventstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamConfig configures a JetStreamLog. The zero value gives the
// defaults documented on each field.
type JetStreamConfig struct {
	// Stream is the JetStream stream name. Default "DWR_LOG".
	Stream string
	// Prefix is the subject prefix; the stream binds "<Prefix>.log.>".
	// Default "dwr".
	Prefix string
	// Partition is the token of this log's subject "<Prefix>.log.<Partition>".
	// Default "0".
	Partition string
	// Replicas is the stream's replication factor: 1 for a single server, 3
	// in a cluster. Default 1.
	Replicas int
	// Duplicates is the stream's deduplication window. Default 2 minutes.
	Duplicates time.Duration
	// AttemptTimeout bounds one publish of an append. An append whose
	// acknowledgement does not come in time (a leader change swallowed it)
	// is published again, identically, until its context ends: the retry is
	// recognised as the same record. Default 1 second.
	AttemptTimeout time.Duration
}

func (c JetStreamConfig) withDefaults() JetStreamConfig {
	c.Stream = orDefault(c.Stream, "DWR_LOG")
	c.Prefix = orDefault(c.Prefix, "dwr")
	c.Partition = orDefault(c.Partition, "0")
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.Duplicates = cmp.Or(c.Duplicates, 2*time.Minute)
	c.AttemptTimeout = cmp.Or(c.AttemptTimeout, time.Second)
	return c
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (c JetStreamConfig) validate() error {
	var errs []error
	if strings.ContainsAny(c.Stream, " \t\r\n.*>/\\") {
		errs = append(errs, fmt.Errorf("stream name %q has a forbidden character", c.Stream))
	}
	for _, tok := range strings.Split(c.Prefix, ".") {
		if tok == "" || strings.ContainsAny(tok, " \t\r\n*>") {
			errs = append(errs, fmt.Errorf("subject prefix %q is not a valid subject", c.Prefix))
			break
		}
	}
	if strings.ContainsAny(c.Partition, " \t\r\n.*>") {
		errs = append(errs, fmt.Errorf("partition %q is not a single subject token", c.Partition))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d not in 1..5", c.Replicas))
	}
	if c.Duplicates < 0 {
		errs = append(errs, fmt.Errorf("negative duplicates window %v", c.Duplicates))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("eventstore: invalid JetStream log config: %w", err)
	}
	return nil
}

// maxHeaderBytes is the room the stream leaves above MaxRecordBytes for the
// headers of an append (message id and expectations), since JetStream counts
// headers in MaxMsgSize.
const maxHeaderBytes = 1024

// readBufferBytes bounds what a tail buffers ahead of fn (a few records).
const readBufferBytes = 8 << 20

// readBatch is the most records a reader pulls at once (and at most
// readBufferBytes of them); readFetchWait is how long a pull waits for
// them when fewer are there (the end of a log whose stream holds other
// subjects too, or a replica catching up).
const (
	readBatch     = 256
	readFetchWait = 50 * time.Millisecond
)

// apiTry bounds one try of a JetStream API request of a read.
const apiTry = 10 * time.Second

// askAgain makes a JetStream API request (call, with a context) and asks
// again each time a try goes unanswered for try, until ctx ends. In a
// cluster whose servers just moved their leaders around, an API request
// can go unanswered for good while the same request sent again is answered
// at once; a read that waited on the first would wait out its whole ctx.
// Within a try it also asks again, every askPause, while NATS finds no
// responders — a node whose JetStream is still starting after a restart,
// or a subject whose interest has not yet reached this connection's node —
// and returns that error once the try has passed.
func askAgain[T any](ctx context.Context, try time.Duration, call func(context.Context) (T, error)) (T, error) {
	for {
		tctx, cancel := context.WithTimeout(ctx, try)
		v, err := call(tctx)
		for errors.Is(err, nats.ErrNoResponders) && sleepUntil(tctx, askPause) {
			v, err = call(tctx)
		}
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return v, err
		}
	}
}

// askPause spaces askAgain's requests that found no responders.
const askPause = 50 * time.Millisecond

// sleepUntil waits d, or until ctx ends (then it returns false).
func sleepUntil(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// JetStreamLog is a Log on one subject ("partition") of a JetStream stream.
// Sequences are the stream's sequences. It is safe for concurrent use.
//
// Appends use the expected last sequence of the partition subject
// (Nats-Expected-Last-Subject-Sequence). An expectation of 0 means "no message
// on the subject yet": nats-server checks it as such (a missing last message
// counts as sequence 0), and nats.go sends it because it keeps the value as a
// pointer. Reads use ordered consumers; LastSeq and the retry check ask the
// stream leader (not a direct get, which a lagging replica may answer).
type JetStreamLog struct {
	js        jetstream.JetStream
	stream    string
	subject   string
	partition string
	msgGet    string // subject of the leader's STREAM.MSG.GET API
	directGet string // subject of the stream's DIRECT.GET API (any replica answers)
	attempt   time.Duration
	// replicas is the stream's replication factor when it was opened.
	replicas int
	// change is cancelled (and replaced) when the stream's leader or the
	// connection changes: the publishes in flight then try again at once
	// (RetryOnChange).
	change atomic.Pointer[changeSignal]
}

// changeSignal ends the attempts in flight when it is cancelled.
type changeSignal struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newChangeSignal() *changeSignal {
	ctx, cancel := context.WithCancel(context.Background())
	return &changeSignal{ctx: ctx, cancel: cancel}
}

var _ Log = (*JetStreamLog)(nil)

// StreamConfig returns the log stream's declared configuration: file
// storage, limits retention with no limit on messages, bytes or age, fsync
// per the server's settings (never asynchronous), MaxMsgSize just above
// MaxRecordBytes, direct gets allowed, deletes, purges and roll-ups denied.
// NewJetStreamLog creates the stream with it, and checks an existing stream
// against it (CheckStreamConfig).
func (c JetStreamConfig) StreamConfig() jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:              c.Stream,
		Description:       "dwr log: commit records, the source of truth",
		Subjects:          []string{c.Prefix + ".log.>"},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: -1,
		Replicas:          c.Replicas,
		Duplicates:        c.Duplicates,
		MaxMsgSize:        MaxRecordBytes + maxHeaderBytes,
		AllowDirect:       true,
		DenyDelete:        true,
		DenyPurge:         true,
	}
}

// ConfigDiff is one setting of a stream that differs from the declared one.
type ConfigDiff struct {
	// Field is the stream setting, as nats-server names it (max_msgs, ...).
	Field string
	// Want says what is required; Got what the stream has.
	Want, Got string
}

// StreamConfigError reports a log stream whose configuration differs from
// the declared one in something that matters: it could lose records (limits,
// deletes, purges, roll-ups), hold fewer copies, not fsync them, or not
// receive them. It wraps ErrIntegrity. dwr never changes such a stream
// itself: an update would hide the change, and could lower its replicas.
type StreamConfigError struct {
	Stream string
	Diffs  []ConfigDiff
}

// Error names every differing setting with the values wanted and found.
func (e *StreamConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "eventstore: stream %s is not configured as dwr's log must be (it was changed outside dwr, which never changes it back):", e.Stream)
	for i, d := range e.Diffs {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, " %s is %s, want %s", d.Field, d.Got, d.Want)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrIntegrity) hold.
func (e *StreamConfigError) Unwrap() error { return ErrIntegrity }

// CheckStreamConfig compares got, an existing stream's configuration, with
// the one cfg declares, in what matters: subjects, file storage, limits
// retention, no message, byte, per-subject or age limit, deletes, purges and
// roll-ups denied, no asynchronous persistence, a max message size that
// takes every record, and at least cfg's replicas. It returns a
// *StreamConfigError naming every difference, or nil.
func CheckStreamConfig(cfg JetStreamConfig, got jetstream.StreamConfig) error {
	want := cfg.StreamConfig()
	var diffs []ConfigDiff
	diff := func(field, want, got string) { diffs = append(diffs, ConfigDiff{Field: field, Want: want, Got: got}) }
	if !slices.Equal(got.Subjects, want.Subjects) {
		diff("subjects", fmt.Sprintf("%q", want.Subjects), fmt.Sprintf("%q", got.Subjects))
	}
	if got.Storage != want.Storage {
		diff("storage", want.Storage.String(), got.Storage.String())
	}
	if got.Retention != want.Retention {
		diff("retention", want.Retention.String(), got.Retention.String())
	}
	unlimited := func(field string, v int64) {
		if v > 0 {
			diff(field, "-1 (unlimited)", strconv.FormatInt(v, 10))
		}
	}
	unlimited("max_msgs", got.MaxMsgs)
	unlimited("max_bytes", got.MaxBytes)
	unlimited("max_msgs_per_subject", got.MaxMsgsPerSubject)
	if got.MaxAge != 0 {
		diff("max_age", "0 (unlimited)", got.MaxAge.String())
	}
	if !got.DenyDelete {
		diff("deny_delete", "true", "false")
	}
	if !got.DenyPurge {
		diff("deny_purge", "true", "false")
	}
	if got.AllowRollup {
		diff("allow_rollup_hdrs", "false", "true")
	}
	if got.PersistMode == jetstream.AsyncPersistMode {
		diff("persist_mode", "default (fsync per the server)", "async")
	}
	if got.MaxMsgSize > 0 && got.MaxMsgSize < want.MaxMsgSize {
		diff("max_msg_size", fmt.Sprintf(">= %d", want.MaxMsgSize), strconv.Itoa(int(got.MaxMsgSize)))
	}
	if got.Replicas < want.Replicas {
		diff("num_replicas", fmt.Sprintf(">= %d", want.Replicas), strconv.Itoa(got.Replicas))
	}
	if len(diffs) == 0 {
		return nil
	}
	return &StreamConfigError{Stream: want.Name, Diffs: diffs}
}

// NewJetStreamLog returns a log on cfg's partition subject of its stream,
// creating the stream with the declared configuration (StreamConfig) if it
// does not exist. An existing stream is checked against it and never
// updated. It returns an error if cfg is invalid, a *StreamConfigError
// (wrapping ErrIntegrity) if the existing stream differs in what matters, or
// an error if the stream cannot be read or created.
func NewJetStreamLog(ctx context.Context, js jetstream.JetStream, cfg JetStreamConfig) (*JetStreamLog, error) {
	return openJetStreamLog(ctx, js, cfg, true)
}

// OpenJetStreamLog is NewJetStreamLog for maintenance: it never creates or
// changes the stream, and returns an error wrapping
// jetstream.ErrStreamNotFound if there is none.
func OpenJetStreamLog(ctx context.Context, js jetstream.JetStream, cfg JetStreamConfig) (*JetStreamLog, error) {
	return openJetStreamLog(ctx, js, cfg, false)
}

// InspectJetStreamLog opens an existing log stream for reading whatever its
// configuration, never changing it, and returns the log with the result of
// checking its configuration (a *StreamConfigError, or nil): for a verifier
// that reports a changed stream and still reads its records. It returns an
// error wrapping jetstream.ErrStreamNotFound if there is no stream, or an
// error reading it.
func InspectJetStreamLog(ctx context.Context, js jetstream.JetStream, cfg JetStreamConfig) (l *JetStreamLog, configErr, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		return nil, nil, fmt.Errorf("eventstore: stream %s: %w", cfg.Stream, err)
	}
	return newJetStreamLog(js, cfg), CheckStreamConfig(cfg, st.CachedInfo().Config), nil
}

func newJetStreamLog(js jetstream.JetStream, cfg JetStreamConfig) *JetStreamLog {
	l := &JetStreamLog{
		js:        js,
		stream:    cfg.Stream,
		subject:   cfg.Prefix + ".log." + cfg.Partition,
		partition: cfg.Partition,
		msgGet:    APIPrefix(js) + "STREAM.MSG.GET." + cfg.Stream,
		directGet: APIPrefix(js) + "DIRECT.GET." + cfg.Stream,
		attempt:   cfg.AttemptTimeout,
	}
	l.change.Store(newChangeSignal())
	return l
}

// RetryOnChange makes the appends in flight publish again at once, rather
// than wait out their attempt (JetStreamConfig.AttemptTimeout), when the
// log stream elects a leader or nc reconnects: the answer they wait for
// may have been lost with the old leader or the old connection (a repeat is
// recognised, as for any attempt). It returns a function that stops it.
func (l *JetStreamLog) RetryOnChange(nc *nats.Conn) (stop func(), err error) {
	sub, err := nc.Subscribe(advisoryLeaderElected+l.stream, func(*nats.Msg) { l.change.Swap(newChangeSignal()).cancel() })
	if err != nil {
		return nil, fmt.Errorf("eventstore: watch the leader of %s: %w", l.stream, err)
	}
	status := nc.StatusChanged(nats.CONNECTED)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case _, ok := <-status:
				if !ok {
					return
				}
				l.change.Swap(newChangeSignal()).cancel()
			}
		}
	}()
	return func() {
		_ = sub.Unsubscribe()
		nc.RemoveStatusListener(status)
		close(done)
	}, nil
}

// advisoryLeaderElected is the subject, less the stream's name, on which
// JetStream announces a stream's new leader.
const advisoryLeaderElected = "$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED."

func openJetStreamLog(ctx context.Context, js jetstream.JetStream, cfg JetStreamConfig, create bool) (*JetStreamLog, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) && create {
		st, err = js.CreateStream(ctx, cfg.StreamConfig())
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // created meanwhile: check it
			st, err = js.Stream(ctx, cfg.Stream)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("eventstore: stream %s: %w", cfg.Stream, err)
	}
	if err := CheckStreamConfig(cfg, st.CachedInfo().Config); err != nil {
		return nil, err
	}
	l := newJetStreamLog(js, cfg)
	l.replicas = st.CachedInfo().Config.Replicas
	return l, nil
}

// Replicas returns the log stream's replication factor as it stood when the
// log was opened: the stream remembers it, so a command that opens the log
// with fewer (a restart without --replicas) keeps what the log has.
func (l *JetStreamLog) Replicas() int { return l.replicas }

// CheckStream reads the stream's configuration again and checks it
// (CheckStreamConfig), as a running service does now and then: a change made
// while it runs is found without a restart. It returns a *StreamConfigError
// or an error reading the stream.
func (l *JetStreamLog) CheckStream(ctx context.Context, cfg JetStreamConfig) error {
	cfg = cfg.withDefaults()
	st, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return fmt.Errorf("eventstore: stream %s: %w", l.stream, err)
	}
	return CheckStreamConfig(cfg, st.CachedInfo().Config)
}

// Stream returns the stream's name.
func (l *JetStreamLog) Stream() string { return l.stream }

// Subject returns the partition subject the log appends to and reads.
func (l *JetStreamLog) Subject() string { return l.subject }

// Append publishes rec to the partition subject, expecting expectedLast as the
// subject's last sequence, with a message id derived from expectedLast and
// rec's SHA-256. It returns the stream sequence of the record.
//
// A blind retry is recognised two ways: within the stream's duplicates window
// a replicated stream answers it as a duplicate (returning the first
// sequence); a single server checks the expectation first and answers 10071,
// so on a conflict Append looks at the first record after expectedLast and, if
// it carries the same message id, returns its sequence. Append itself
// publishes again when an attempt gets no answer within the attempt timeout
// (a leader change can swallow an acknowledgement) or finds a proposal in
// flight (10164), until ctx ends.
//
// Errors: ErrTooLarge (rec over MaxRecordBytes, or refused by the server or
// the connection's max payload); ErrStorageFull (the store's or the
// account's limit refused it: noRoom); ErrConflict (API error 10071, or 10164 still
// at ctx's end; the wrapped *jetstream.APIError stays reachable); otherwise an error wrapping
// ErrUnknownOutcome and the cause.
func (l *JetStreamLog) Append(ctx context.Context, rec []byte, expectedLast uint64) (uint64, error) {
	if len(rec) > MaxRecordBytes {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(rec), MaxRecordBytes)
	}
	id := fmt.Sprintf("%s:%d:%s", l.partition, expectedLast, hashBytes(rec))
	var ack *jetstream.PubAck
	var err error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		ack, err = l.publish(ctx, rec, id, expectedLast)
		if err == nil || !retryable(ctx, err) {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err == nil {
		return ack.Sequence, nil
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && isConflictCode(apiErr.ErrorCode):
		if seq, ok := l.landed(ctx, id, expectedLast); ok {
			return seq, nil
		}
		return 0, fmt.Errorf("%w: expected last sequence %d on %s: %w", ErrConflict, expectedLast, l.subject, err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum,
		errors.Is(err, nats.ErrMaxPayload):
		return 0, fmt.Errorf("%w: %d bytes on %s: %w", ErrTooLarge, len(rec), l.subject, err)
	case errors.As(err, &apiErr) && noRoom(apiErr.ErrorCode):
		return 0, fmt.Errorf("%w: %d bytes on %s: %w", ErrStorageFull, len(rec), l.subject, err)
	default:
		return 0, fmt.Errorf("%w: append to %s: %w", ErrUnknownOutcome, l.subject, err)
	}
}

// publish makes one attempt at an append, bounded by the attempt timeout.
func (l *JetStreamLog) publish(ctx context.Context, rec []byte, id string, expectedLast uint64) (*jetstream.PubAck, error) {
	actx, cancel := context.WithTimeout(ctx, l.attempt)
	defer cancel()
	defer context.AfterFunc(l.change.Load().ctx, cancel)()
	msg := nats.NewMsg(l.subject)
	msg.Data = rec
	return l.js.PublishMsg(actx, msg,
		jetstream.WithExpectStream(l.stream),
		jetstream.WithExpectLastSequencePerSubject(expectedLast),
		jetstream.WithMsgID(id))
}

// retryable reports whether an append attempt failed without an answer (a
// timeout, no responders while a leader is elected, a reconnect) while the
// append's own context still runs: publishing the same record again is then
// safe, as Append recognises a repeat.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant {
		return true // a proposal (likely our own earlier attempt) is in flight: ask again once it settles
	}
	// context.Canceled: the attempt was ended by a change of the stream's
	// leader or of the connection (RetryOnChange).
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}

// noRoom reports whether a publication's API error says the store has no
// room for it — nats-server's JSAccountResourcesExceededErr (the account's
// limit: an operator's cluster), JSInsufficientResourcesErr (the server's
// store limit) or JSStorageResourcesExceededErr — codes jetstream names no
// constant for. Nothing was stored: the server checks them before storing,
// after its duplicate check (a retry of an append that landed is answered
// as a duplicate, not with these).
func noRoom(code jetstream.ErrorCode) bool {
	return code == 10002 || code == 10023 || code == 10047
}

func isConflictCode(c jetstream.ErrorCode) bool {
	return c == jetstream.JSErrCodeStreamWrongLastSequence || c == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// landed reports whether the first record after expectedLast on the subject
// carries message id id, i.e. an earlier attempt of this append succeeded.
func (l *JetStreamLog) landed(ctx context.Context, id string, expectedLast uint64) (uint64, bool) {
	m, err := l.getMsg(ctx, msgGetRequest{Seq: expectedLast + 1, NextFor: l.subject})
	if err != nil || m == nil || len(m.Header) == 0 {
		return 0, false
	}
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil || h.Get(jetstream.MsgIDHeader) != id {
		return 0, false
	}
	return m.Sequence, true
}

// LastSeq returns the stream sequence of the last record on the partition
// subject, or 0 if there is none, as the stream leader sees it. It returns an
// error if the request fails.
func (l *JetStreamLog) LastSeq(ctx context.Context) (uint64, error) {
	m, err := l.getMsg(ctx, msgGetRequest{LastFor: l.subject})
	if err != nil {
		return 0, fmt.Errorf("eventstore: last sequence of %s: %w", l.subject, err)
	}
	if m == nil {
		return 0, nil
	}
	return m.Sequence, nil
}

// Stat returns the number of records on the partition subject and the
// stream sequences of its first and last, asked of the stream leader (the
// count first, so that an append racing with Stat shows as a later last
// sequence rather than as a count above it). It returns an error if a
// request fails.
func (l *JetStreamLog) Stat(ctx context.Context) (LogStat, error) {
	st, err := l.leaderInfo(ctx)
	if err != nil {
		return LogStat{}, fmt.Errorf("eventstore: stat %s: %w", l.subject, err)
	}
	var info *jetstream.StreamInfo
	for { // as the leader gives it (see leaderInfo)
		if info, err = st.Info(ctx, jetstream.WithSubjectFilter(l.subject)); err != nil {
			return LogStat{}, fmt.Errorf("eventstore: stat %s: %w", l.subject, err)
		}
		if info.Cluster == nil || info.Cluster.Leader != "" {
			break
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return LogStat{}, fmt.Errorf("eventstore: stat %s: %w", l.subject, ctx.Err())
		case <-t.C:
		}
	}
	out := LogStat{Records: info.State.Subjects[l.subject]}
	first, err := l.getMsg(ctx, msgGetRequest{Seq: 1, NextFor: l.subject})
	if err != nil {
		return LogStat{}, fmt.Errorf("eventstore: first record of %s: %w", l.subject, err)
	}
	if first != nil {
		out.First = first.Sequence
	}
	if out.Last, err = l.LastSeq(ctx); err != nil {
		return LogStat{}, err
	}
	return out, nil
}

// Read calls fn for each record on the partition subject from from to the
// stream's last sequence at the time of the call, in order. It pulls batches
// (at most readBufferBytes each) from an ephemeral consumer until the server
// has no more to give and the subject's last record is read: after damage
// to its files, JetStream can report a subject's last message (or its count)
// wrongly while the records before it are still there, so the read goes on
// past it while the consumer gives more.
//
// On a replicated stream the consumer reads the copy of whichever replica
// the meta leader placed it on, which may be one still catching up (a node
// just restarted, or resumed): its "nothing more" is not the log's end.
// There, Read reads on until the subject's last record as the stream's
// leader gives it: it waits readLagWait for that replica to deliver more,
// then reads on with a new consumer (placed anew, likely on a replica that
// is current), and after readConsumers of them asks the leader for the rest,
// one record at a time. It returns fn's error, ctx's error, or an error
// reading the stream.
func (l *JetStreamLog) Read(ctx context.Context, from uint64, fn func(seq uint64, rec []byte) error) error {
	st, err := l.leaderInfo(ctx)
	if err != nil {
		return fmt.Errorf("eventstore: read %s: %w", l.subject, err)
	}
	until := st.CachedInfo().State.LastSeq
	// A read reaches the subject's last record as the leader gives it: a
	// consumer's "nothing more" is not taken for the log's end before it.
	want, err := l.LastSeq(ctx)
	if err != nil {
		return fmt.Errorf("eventstore: read %s: %w", l.subject, err)
	}
	until = max(until, want)
	from = max(from, 1)
	if from > until {
		return nil
	}
	last := from - 1 // the last record read
	for consumers := 1; ; consumers++ {
		lagged, err := l.readConsumer(ctx, &last, until, want, fn)
		switch {
		case err != nil || !lagged:
			return err
		case consumers < readConsumers:
			continue // a new consumer may be placed on a replica that is current
		}
		return l.readFromLeader(ctx, last+1, want, fn)
	}
}

// Record returns the record at seq. A record never changes once stored, so
// any replica may give it (a direct get, without the JetStream API's JSON
// and base64); one that does not hold it yet (a replica behind), or none
// that answers, sends the question to the stream's leader.
func (l *JetStreamLog) Record(ctx context.Context, seq uint64) ([]byte, error) {
	if rec := l.directRecord(ctx, seq); rec != nil {
		return rec, nil
	}
	m, err := askAgain(ctx, apiTry, func(ctx context.Context) (*storedMsg, error) {
		return l.getMsg(ctx, msgGetRequest{Seq: seq, NextFor: l.subject})
	})
	if err != nil {
		return nil, fmt.Errorf("eventstore: read %s at seq %d: %w", l.subject, seq, err)
	}
	if m == nil || m.Sequence != seq {
		return nil, fmt.Errorf("%w: %s holds no record at seq %d", ErrIntegrity, l.subject, seq)
	}
	return m.Data, nil
}

// directRecord is the record at seq as a direct get gives it, or nil when
// none came (not held by the replica that answered, no answer, an error).
func (l *JetStreamLog) directRecord(ctx context.Context, seq uint64) []byte {
	ctx, cancel := context.WithTimeout(ctx, directGetWait)
	defer cancel()
	resp, err := l.js.Conn().RequestWithContext(ctx, l.directGet, fmt.Appendf(nil, `{"seq":%d}`, seq))
	if err != nil || resp.Header.Get("Status") != "" ||
		resp.Header.Get(jetstream.SubjectHeader) != l.subject || resp.Header.Get(jetstream.SequenceHeader) != strconv.FormatUint(seq, 10) {
		return nil
	}
	return resp.Data
}

// directGetWait bounds a direct get before the leader is asked instead.
const directGetWait = time.Second

// readConsumers is how many consumers a read tries, each placed anew, before
// it asks the leader for the rest record by record.
const readConsumers = 3

// readConsumer reads with one ephemeral consumer from *last+1, advancing
// *last, to until or, when its replica has no more, to want. lagged is true
// when the replica gave nothing for readLagWait while the leader has more.
func (l *JetStreamLog) readConsumer(ctx context.Context, last *uint64, until, want uint64, fn func(seq uint64, rec []byte) error) (lagged bool, err error) {
	cons, err := askAgain(ctx, apiTry, func(ctx context.Context) (jetstream.Consumer, error) {
		return l.js.CreateConsumer(ctx, l.stream, jetstream.ConsumerConfig{
			FilterSubject:     l.subject,
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       *last + 1,
			AckPolicy:         jetstream.AckNonePolicy,
			MemoryStorage:     true,
			InactiveThreshold: time.Minute, // one made by a try whose answer was lost goes by itself
		})
	})
	if err != nil {
		return false, fmt.Errorf("eventstore: read %s: %w", l.subject, err)
	}
	defer l.deleteConsumer(ctx, cons)
	var lagging time.Time
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		// At most readBufferBytes at once: a batch of large records sent
		// whole (256 of up to 1 MiB) passed the connection's max_pending
		// on the server, which cut the connection as a slow consumer — the
		// read lost the rest of the batch, and every other request on the
		// connection failed with it.
		ask := readBatch
		if *last < want {
			ask = int(min(uint64(readBatch), want-*last))
		}
		batch, err := cons.Fetch(ask, jetstream.FetchMaxBytes(readBufferBytes), jetstream.FetchMaxWait(readFetchWait))
		if err != nil {
			return false, fmt.Errorf("eventstore: read %s: %w", l.subject, err)
		}
		n, done := 0, false
		for msg := range batch.Messages() {
			n++
			if done {
				continue // drain the batch
			}
			md, err := msg.Metadata()
			if err != nil {
				return false, fmt.Errorf("eventstore: read %s: %w", l.subject, err)
			}
			if md.Sequence.Stream > until {
				done = true
				continue
			}
			if err := fn(md.Sequence.Stream, msg.Data()); err != nil {
				return false, err
			}
			*last = md.Sequence.Stream
			done = *last == until
		}
		// No responders: the consumer's interest has not yet reached the
		// node this connection is on (a cluster propagates it a moment after
		// the consumer is made) — as a fetch that gave nothing.
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrNoResponders) {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, fmt.Errorf("eventstore: read %s: %w", l.subject, err)
		}
		switch {
		case done:
			return false, nil
		case n > 0:
			lagging = time.Time{}
			continue
		case *last >= want:
			return false, nil
		case lagging.IsZero():
			lagging = time.Now()
		case time.Since(lagging) > readLagWait:
			return true, nil
		}
		t := time.NewTimer(readLagPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
	}
}

// readLagWait is how long a read waits, without a new record, for the
// replica serving it to catch up with the stream's leader before it asks
// the leader; readLagPoll is how often it asks the replica meanwhile.
const (
	readLagWait = time.Second
	readLagPoll = 20 * time.Millisecond
)

// readFromLeader calls fn for each record on the partition subject from
// from to until, asking the stream's leader for each (STREAM.MSG.GET): for
// the end of a read whose replica lags behind.
func (l *JetStreamLog) readFromLeader(ctx context.Context, from, until uint64, fn func(seq uint64, rec []byte) error) error {
	for seq := from; seq <= until; {
		m, err := askAgain(ctx, apiTry, func(ctx context.Context) (*storedMsg, error) {
			return l.getMsg(ctx, msgGetRequest{Seq: seq, NextFor: l.subject})
		})
		if err != nil {
			return fmt.Errorf("eventstore: read %s from its leader at seq %d: %w", l.subject, seq, err)
		}
		if m == nil || m.Sequence > until {
			return nil
		}
		if err := fn(m.Sequence, m.Data); err != nil {
			return err
		}
		seq = m.Sequence + 1
	}
	return nil
}

// leaderInfo returns the stream with its information as its leader gives
// it. While a replicated stream has no leader (a node's restart, an
// election), any of its replicas answers a stream info request with its own
// state, which may be stale — a restarted node still catching up reports
// fewer records than were acknowledged — so such an answer is not taken: it
// asks again every 100 ms until the stream has a leader, or ctx ends.
func (l *JetStreamLog) leaderInfo(ctx context.Context) (jetstream.Stream, error) {
	for {
		st, err := askAgain(ctx, apiTry, func(ctx context.Context) (jetstream.Stream, error) { return l.js.Stream(ctx, l.stream) })
		if err != nil {
			return nil, err
		}
		if ci := st.CachedInfo().Cluster; ci == nil || ci.Leader != "" {
			return st, nil
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Tail calls fn for every record on the partition subject from from on, using
// an ordered consumer, until ctx is done (returning ctx's error) or fn fails
// (returning its error). It also returns an error if the consumer cannot be
// created or fails beyond its own recovery.
func (l *JetStreamLog) Tail(ctx context.Context, from uint64, fn func(seq uint64, rec []byte) error) error {
	return l.consume(ctx, max(from, 1), 0, fn)
}

// consume delivers records from from on, stopping after until (0: never).
func (l *JetStreamLog) consume(ctx context.Context, from, until uint64, fn func(seq uint64, rec []byte) error) error {
	cons, err := l.js.OrderedConsumer(ctx, l.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{l.subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return fmt.Errorf("eventstore: read %s: %w", l.subject, err)
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(readBufferBytes))
	if err != nil {
		return fmt.Errorf("eventstore: read %s: %w", l.subject, err)
	}
	// Stopping the iterator also ends a consumer reset that is retrying.
	stopOnDone := context.AfterFunc(ctx, it.Stop)
	defer func() {
		stopOnDone()
		it.Stop()
		l.deleteConsumer(ctx, cons)
	}()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("eventstore: read %s: %w", l.subject, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("eventstore: read %s: %w", l.subject, err)
		}
		seq := md.Sequence.Stream
		if err := fn(seq, msg.Data()); err != nil {
			return err
		}
		if until > 0 && seq >= until {
			return nil
		}
	}
}

// deleteConsumer removes the reader's ephemeral consumer now rather than
// after its inactivity threshold. Failure only delays the cleanup.
func (l *JetStreamLog) deleteConsumer(ctx context.Context, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = l.js.DeleteConsumer(ctx, l.stream, info.Name)
}

// APIPrefix returns the JetStream API subject prefix js uses (its domain's,
// or its own, or the default).
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	default:
		return jetstream.DefaultAPIPrefix
	}
}

type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

type storedMsg struct {
	Sequence uint64 `json:"seq"`
	Header   []byte `json:"hdrs,omitempty"`
	Data     []byte `json:"data,omitempty"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *storedMsg          `json:"message,omitempty"`
}

// getMsg asks the stream leader for one message (STREAM.MSG.GET, never a
// direct get, which any replica may answer with stale data). It returns nil
// and no error when there is no such message.
func (l *JetStreamLog) getMsg(ctx context.Context, req msgGetRequest) (*storedMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := l.js.Options().DefaultTimeout
		if timeout <= 0 {
			timeout = 5 * time.Second
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	resp, err := l.js.Conn().RequestWithContext(ctx, l.msgGet, body)
	if err != nil {
		return nil, err
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("decode message get response: %w", err)
	}
	switch {
	case r.Error != nil && r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, nil
	case r.Error != nil:
		return nil, r.Error
	case r.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	return r.Message, nil
}
