package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Duplicates == 0 {
		c.Duplicates = 2 * time.Minute
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = time.Second
	}
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

// readBufferBytes bounds what a reader buffers ahead of fn (a few records).
const readBufferBytes = 8 << 20

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
	attempt   time.Duration
}

var _ Log = (*JetStreamLog)(nil)

// NewJetStreamLog creates or updates the stream described by cfg (file
// storage, limits retention, fsync per the server's settings, MaxMsgSize just
// above MaxRecordBytes, direct gets allowed, deletes and purges denied) and
// returns a log on its partition subject. It returns an error if cfg is
// invalid or the stream cannot be created or updated (for example when an
// existing stream has a different storage type).
func NewJetStreamLog(ctx context.Context, js jetstream.JetStream, cfg JetStreamConfig) (*JetStreamLog, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "dwr log: commit records, the source of truth",
		Subjects:    []string{cfg.Prefix + ".log.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    cfg.Replicas,
		Duplicates:  cfg.Duplicates,
		MaxMsgSize:  MaxRecordBytes + maxHeaderBytes,
		AllowDirect: true,
		DenyDelete:  true,
		DenyPurge:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("eventstore: ensure stream %s: %w", cfg.Stream, err)
	}
	return &JetStreamLog{
		js:        js,
		stream:    cfg.Stream,
		subject:   cfg.Prefix + ".log." + cfg.Partition,
		partition: cfg.Partition,
		msgGet:    apiPrefix(js) + "STREAM.MSG.GET." + cfg.Stream,
		attempt:   cfg.AttemptTimeout,
	}, nil
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
// the connection's max payload); ErrConflict (API error 10071, or 10164 still
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
	default:
		return 0, fmt.Errorf("%w: append to %s: %w", ErrUnknownOutcome, l.subject, err)
	}
}

// publish makes one attempt at an append, bounded by the attempt timeout.
func (l *JetStreamLog) publish(ctx context.Context, rec []byte, id string, expectedLast uint64) (*jetstream.PubAck, error) {
	actx, cancel := context.WithTimeout(ctx, l.attempt)
	defer cancel()
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
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
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

// Read calls fn for each record on the partition subject from from to the last
// sequence at the time of the call, using an ordered consumer. It returns fn's
// error, ctx's error, or an error reading the stream.
func (l *JetStreamLog) Read(ctx context.Context, from uint64, fn func(seq uint64, rec []byte) error) error {
	last, err := l.LastSeq(ctx)
	if err != nil {
		return err
	}
	from = max(from, 1)
	if from > last {
		return nil
	}
	return l.consume(ctx, from, last, fn)
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

// apiPrefix returns the JetStream API subject prefix js uses.
func apiPrefix(js jetstream.JetStream) string {
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
