package handlers

import (
	"context"
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

// maxDeliveriesAdvisory is the part of JetStream's max-deliveries advisory
// that quarantine reads.
type maxDeliveriesAdvisory struct {
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries int       `json:"deliveries"`
}

// advisoriesStream creates the stream that keeps JetStream's max-deliveries
// advisories of the work stream: an advisory is an ordinary message, lost
// when nobody listens, so the stream holds it until a writer has quarantined
// its item — also one that fired while no writer ran.
func advisoriesStream(ctx context.Context, js jetstream.JetStream, cfg Config, workStream string) (string, error) {
	name := strings.ToUpper(cfg.Prefix) + "_ADVISORIES"
	persist := jetstream.AsyncPersistMode // derived: a lost advisory is found again when the item is re-derived
	if cfg.Replicas > 1 {
		persist = jetstream.DefaultPersistMode
	}
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: name, Description: "dwr: max-deliveries advisories of the work stream, kept until the writer quarantines their items",
		Subjects: []string{"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + workStream + ".*"},
		Storage:  jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Replicas: cfg.Replicas,
		PersistMode: persist, MaxAge: 7 * 24 * time.Hour, MaxMsgSize: 64 << 10,
	})
	if err != nil {
		return "", fmt.Errorf("handlers: advisories stream: %w", err)
	}
	return name, nil
}

// quarantine consumes, while this replica is the writer, the advisories of
// work items delivered the most times their consumer allows without being
// acknowledged (an executor that crashes on them, say). JetStream leaves such
// an item in the work queue, where it would stay forever: the writer fails
// its task (reason quarantined, which fails its pending dependents too) and
// deletes the item, so that the queue keeps flowing. An advisory is
// acknowledged once its item is dealt with, and delivered again otherwise.
func (s *Service) quarantine(ctx context.Context) (func(), error) {
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.advisories, jetstream.ConsumerConfig{
		Durable: "dwr-quarantine", Description: "the writer quarantines the items of these advisories",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute, MaxDeliver: -1, MaxAckPending: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("handlers: quarantine consumer: %w", err)
	}
	var wg sync.WaitGroup
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var a maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Data(), &a); err != nil || a.StreamSeq == 0 {
			s.cfg.Logger.Warn("handlers: unreadable max-deliveries advisory; dropped", "err", err)
			_ = m.Term()
			return
		}
		wg.Go(func() {
			if err := s.quarantineItem(ctx, a); err != nil {
				if ctx.Err() == nil {
					s.cfg.Logger.Error("handlers: quarantine failed; will retry", "seq", a.StreamSeq, "err", err)
				}
				_ = m.NakWithDelay(5 * time.Second)
				return
			}
			_ = m.Ack()
		})
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		return nil, fmt.Errorf("handlers: consume advisories: %w", err)
	}
	return func() { cc.Stop(); wg.Wait() }, nil
}

// quarantineItem fails the task of the work item an advisory names and
// deletes the item; an item already gone needs nothing.
func (s *Service) quarantineItem(ctx context.Context, a maxDeliveriesAdvisory) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.dispatch.stream)
	if err != nil {
		return fmt.Errorf("work stream: %w", err)
	}
	raw, err := st.GetMsg(ctx, a.StreamSeq)
	if isNotFound(err) {
		return nil // completed, or quarantined already
	}
	if err != nil {
		return fmt.Errorf("read work item %d: %w", a.StreamSeq, err)
	}
	if storedAfter(raw.Time, a.Time, s.cfg.Replicas) {
		s.cfg.Logger.Warn("handlers: a max-deliveries advisory is older than the work item now at its sequence; nothing quarantined", "seq", a.StreamSeq, "task", raw.Header.Get(jetstream.MsgIDHeader))
		return nil
	}
	var it schemas.WorkItem
	if err := json.Unmarshal(raw.Data, &it); err != nil || it.TaskID == "" || !domain.ValidName(it.Workspace) {
		s.cfg.Logger.Error("handlers: quarantine: unreadable work item; deleting it", "seq", a.StreamSeq, "err", err)
	} else {
		reason := fmt.Sprintf("work item (attempt %d) was delivered %d times on consumer %s without being completed", it.Attempt, a.Deliveries, a.Consumer)
		o := s.execute(ctx, &domain.QuarantineTask{TaskID: it.TaskID, Reason: reason}, domain.Meta{
			Workspace: it.Workspace, CommandID: fmt.Sprintf("quarantine.%s.%d", it.TaskID, it.Attempt), Actor: actorQuarantine})
		if o.Err != nil && domain.CodeOf(o.Err) != domain.CodeNotFound {
			return fmt.Errorf("fail task %s: %w", it.TaskID, o.Err)
		}
		if o.Err == nil {
			s.metrics.quarantined()
		}
		s.cfg.Logger.Warn("handlers: task quarantined", "task", it.TaskID, "attempt", it.Attempt, "deliveries", a.Deliveries)
	}
	if err := st.DeleteMsg(ctx, a.StreamSeq); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete work item %d: %w", a.StreamSeq, err)
	}
	return nil
}

// storedAfter reports whether the work item now at an advisory's sequence
// was stored (at stored) after the advisory fired (at fired): then it is
// not the item the advisory is about. A single server killed can lose the
// work stream's last items (it is not fsynced) and give their numbers to the
// next ones; the item the advisory was about is gone with them. Only a
// stream of one replica loses them so (a replicated one is not async), and
// only there do both times come from one server's clock: on a cluster the
// stream's leader and the consumer's may be two servers, whose clocks need
// not agree, so the times are not compared.
func storedAfter(stored, fired time.Time, replicas int) bool {
	return replicas <= 1 && !fired.IsZero() && stored.After(fired)
}

func isNotFound(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrMsgNotFound) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound)
}
