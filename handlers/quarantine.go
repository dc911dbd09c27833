package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dwr-run/dwr/domain"
)

// maxDeliveriesAdvisory is the part of JetStream's max-deliveries advisory
// that quarantine reads.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// quarantine listens, while this replica is the writer, for work items
// delivered the most times their consumer allows without being acknowledged
// (an executor that crashes on them, say). JetStream leaves such an item in
// the work queue, where it would stay forever: the writer fails its task
// (reason quarantined, which fails its pending dependents too) and deletes
// the item, so that the queue keeps flowing.
func (s *Service) quarantine(ctx context.Context) (func(), error) {
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + s.dispatch.stream + ".*"
	sub, err := s.nc.Subscribe(subject, func(m *nats.Msg) {
		var a maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Data, &a); err != nil {
			s.cfg.Logger.Warn("handlers: unreadable max-deliveries advisory", "err", err)
			return
		}
		go s.quarantineItem(ctx, a)
	})
	if err != nil {
		return nil, fmt.Errorf("handlers: subscribe to %s: %w", subject, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

func (s *Service) quarantineItem(ctx context.Context, a maxDeliveriesAdvisory) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, s.dispatch.stream)
	if err != nil {
		s.cfg.Logger.Error("handlers: quarantine: work stream", "err", err)
		return
	}
	raw, err := st.GetMsg(ctx, a.StreamSeq)
	if err != nil {
		s.cfg.Logger.Warn("handlers: quarantine: work item gone", "seq", a.StreamSeq, "err", err)
		return
	}
	var it WorkItem
	if err := json.Unmarshal(raw.Data, &it); err != nil || it.TaskID == "" || !domain.ValidName(it.Workspace) {
		s.cfg.Logger.Error("handlers: quarantine: unreadable work item; deleting it", "seq", a.StreamSeq, "err", err)
	} else {
		reason := fmt.Sprintf("work item (attempt %d) was delivered %d times on consumer %s without being completed", it.Attempt, a.Deliveries, a.Consumer)
		o := s.execute(ctx, &domain.QuarantineTask{TaskID: it.TaskID, Reason: reason}, domain.Meta{
			Workspace: it.Workspace, CommandID: fmt.Sprintf("quarantine.%s.%d", it.TaskID, it.Attempt), Actor: "dwr-quarantine"})
		if o.Err != nil && domain.CodeOf(o.Err) != domain.CodeNotFound {
			s.cfg.Logger.Error("handlers: quarantine: could not fail the task; the item stays", "task", it.TaskID, "err", o.Err)
			return
		}
		s.cfg.Logger.Warn("handlers: task quarantined", "task", it.TaskID, "attempt", it.Attempt, "deliveries", a.Deliveries)
	}
	if err := st.DeleteMsg(ctx, a.StreamSeq); err != nil && !isNotFound(err) {
		s.cfg.Logger.Error("handlers: quarantine: delete work item", "seq", a.StreamSeq, "err", err)
	}
}

func isNotFound(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrMsgNotFound) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound)
}
