package projections

import (
	"github.com/cockroachdb/pebble/v2"

	"github.com/dwr-run/dwr/domain"
)

// ApprovalView is an approval as the inbox shows it: the approval with the
// task it belongs to.
type ApprovalView struct {
	domain.Approval
	Workspace string `json:"workspace"`
	TaskKey   string `json:"task_key,omitempty"`
	TaskTitle string `json:"task_title,omitempty"`
	Queue     string `json:"queue"`
	GoalID    string `json:"goal_id,omitempty"`
	TaskState string `json:"task_state"`
}

// ApprovalStates are the states the inbox lists approvals by.
var ApprovalStates = []string{domain.ApprovalStatePending, domain.ApprovalStateDecided,
	domain.ApprovalStateExpired, domain.ApprovalStateWithdrawn}

// moveApprovals keeps the approvals index (ap/<ws>/<state>/<id>) in step
// with a task's approvals, in batch b.
func moveApprovals(b *pebble.Batch, before, after *domain.Task) error {
	if len(after.Approvals) == 0 {
		return nil
	}
	for i, a := range after.Approvals {
		if before != nil && i < len(before.Approvals) {
			was := before.Approvals[i].State
			if was == a.State {
				continue
			}
			if err := b.Delete(key(pApproval, after.Workspace, was, a.ID), nil); err != nil {
				return err
			}
		}
		if err := b.Set(key(pApproval, after.Workspace, a.State, a.ID), nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// ApprovalFilter selects approvals; State "" means pending, "all" every state.
type ApprovalFilter struct {
	State string
	Role  string // only approvals this role may decide ("" = any)
	After string // an approval id: list those after it
	Limit int    // 0 = all
}

// ListApprovals returns the approvals of workspace ws that f selects, by
// state and then id (oldest first within a state).
func (s *Store) ListApprovals(ws string, f ApprovalFilter) ([]*ApprovalView, error) {
	states := []string{f.State}
	switch f.State {
	case "":
		states = []string{domain.ApprovalStatePending}
	case "all":
		states = ApprovalStates
	}
	var out []*ApprovalView
	for _, st := range states {
		p := key(pApproval, ws, st, "")
		var ids []string
		if err := s.scan(p, func(k, _ []byte) error {
			if id := string(k[len(p):]); id > f.After {
				ids = append(ids, id)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		for _, id := range ids {
			if f.Limit > 0 && len(out) >= f.Limit {
				return out, nil
			}
			v, err := s.Approval(ws, id)
			if err != nil {
				return nil, err
			}
			if v == nil || v.State != st || (f.Role != "" && v.Role != "" && v.Role != f.Role) {
				continue
			}
			out = append(out, v)
		}
	}
	return out, nil
}

// Approval returns approval id of workspace ws, or nil when there is none.
func (s *Store) Approval(ws, id string) (*ApprovalView, error) {
	taskID, _, ok := domain.ParseApprovalID(id)
	if !ok {
		return nil, nil
	}
	t, err := s.Task(taskID)
	if err != nil || t == nil || t.Workspace != ws {
		return nil, err
	}
	a := t.Approval(id)
	if a == nil {
		return nil, nil
	}
	return &ApprovalView{Approval: *a, Workspace: ws, TaskKey: t.Key, TaskTitle: t.Spec.Title, Queue: t.Spec.Queue,
		GoalID: t.GoalID, TaskState: t.State}, nil
}
