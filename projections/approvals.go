package projections

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/schemas"
)

// ApprovalView is an approval as the inbox shows it: the approval with the
// task it belongs to.
type ApprovalView = schemas.ApprovalView

// ApprovalStates are the states the inbox lists approvals by.
var ApprovalStates = schemas.ApprovalStates

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
	// After continues a listing after the approval a cursor names
	// (Cursor): an approval id, or "<state>/<approval id>" when the listing
	// is of every state. A bare id there lists the approvals after it in
	// each state.
	After string
	Limit int // 0 = all
}

// Cursor returns the cursor that continues the listing f selects after
// approval a: a's id, or for a listing of every state "<state>/<id>".
func (f ApprovalFilter) Cursor(a *ApprovalView) string {
	if f.State == "all" {
		return a.State + "/" + a.ID
	}
	return a.ID
}

// ListApprovals returns the approvals of workspace ws that f selects, by
// state and then id (oldest first within a state).
func (s *Store) ListApprovals(ws string, f ApprovalFilter) ([]*ApprovalView, error) {
	var out []*ApprovalView
	err := s.EachApproval(ws, f, func(a *ApprovalView) bool {
		out = append(out, a)
		return f.Limit == 0 || len(out) < f.Limit
	})
	return out, err
}

// EachApproval calls fn with the approvals of workspace ws that f selects
// (its Limit aside), in ListApprovals's order, until fn returns false. It
// returns an error wrapping ErrCursor when f.After is not a cursor of the
// listing.
func (s *Store) EachApproval(ws string, f ApprovalFilter, fn func(*ApprovalView) bool) error {
	states := []string{f.State}
	from, after := "", f.After
	switch f.State {
	case "":
		states = []string{domain.ApprovalStatePending}
	case "all":
		states = ApprovalStates
		if st, id, ok := strings.Cut(f.After, "/"); ok {
			if !slices.Contains(ApprovalStates, st) {
				return fmt.Errorf("%w: %q names no approval state", ErrCursor, f.After)
			}
			from, after = st, id
		}
	}
	if f.State != "all" && strings.Contains(f.After, "/") {
		return fmt.Errorf("%w: %q is not an approval id", ErrCursor, f.After)
	}
	more := true
	for _, st := range states {
		if from != "" && st != from {
			continue // a state the cursor has passed
		}
		err := s.eachID(key(pApproval, ws, st, ""), after, func(id string) (bool, error) {
			v, err := s.Approval(ws, id)
			if err != nil {
				return false, err
			}
			if v == nil || v.State != st || (f.Role != "" && v.Role != "" && v.Role != f.Role) {
				return true, nil
			}
			more = fn(v)
			return more, nil
		})
		if err != nil || !more {
			return err
		}
		if from != "" {
			from, after = "", "" // the states after the cursor's, whole
		}
	}
	return nil
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

// CountApprovals returns how many approvals of workspace ws are in state
// (domain.ApprovalStatePending, ...), from the inbox's index alone: none is
// read.
func (s *Store) CountApprovals(ws, state string) (int, error) {
	n := 0
	err := s.eachID(key(pApproval, ws, state, ""), "", func(string) (bool, error) {
		n++
		return true, nil
	})
	return n, err
}
