package projections

import (
	"encoding/json"
	"fmt"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
)

// ListWorkspaces returns every workspace, by name.
func (s *Store) ListWorkspaces() ([]*domain.Workspace, error) {
	var out []*domain.Workspace
	err := s.scan(key(pWorkspace, ""), func(_, v []byte) error {
		var w domain.Workspace
		if err := json.Unmarshal(v, &w); err != nil {
			return err
		}
		out = append(out, &w)
		return nil
	})
	return out, err
}

// GoalView is a goal with its plan graph (each node with its task's state)
// and the number of its tasks in each state.
type GoalView struct {
	*domain.Goal
	Nodes  []PlanNode     `json:"nodes,omitempty"`
	Counts map[string]int `json:"counts"`
}

// PlanNode is one task of a goal's current plan.
type PlanNode struct {
	domain.PlanTask
	State string `json:"state"`
}

// ListGoals returns the goals of workspace ws, oldest first, at most limit
// (0 = all) after the goal id after.
func (s *Store) ListGoals(ws, after string, limit int) ([]*GoalView, error) {
	var ids []string
	p := key(pGoalByWS, ws, "")
	err := s.scan(p, func(k, _ []byte) error {
		id := string(k[len(p):])
		if id > after && (limit == 0 || len(ids) < limit) {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*GoalView, 0, len(ids))
	for _, id := range ids {
		g, err := s.GoalView(ws, id)
		if err != nil {
			return nil, err
		}
		if g != nil {
			out = append(out, g)
		}
	}
	return out, nil
}

// GoalView returns goal id of workspace ws with its plan graph and counts, or
// nil when there is no such goal.
func (s *Store) GoalView(ws, id string) (*GoalView, error) {
	g, err := s.Goal(id)
	if err != nil || g == nil || g.Workspace != ws {
		return nil, err
	}
	v := &GoalView{Goal: g, Counts: map[string]int{}}
	if _, err := s.get(key(pGoalCounts, id), &v.Counts); err != nil {
		return nil, err
	}
	for _, pt := range g.Plan {
		t, err := s.Task(pt.TaskID)
		if err != nil {
			return nil, err
		}
		n := PlanNode{PlanTask: pt}
		if t != nil {
			n.State = t.State
		}
		v.Nodes = append(v.Nodes, n)
	}
	return v, nil
}

// TaskFilter selects tasks; empty fields select all.
type TaskFilter struct {
	State  string
	GoalID string
	After  string // a task id: list those after it
	Limit  int    // 0 = all
}

// ListTasks returns the tasks of workspace ws that f selects, ordered by
// state and id (by id alone when f names a state or a goal).
func (s *Store) ListTasks(ws string, f TaskFilter) ([]*domain.Task, error) {
	var ids []string
	collect := func(p []byte) error {
		return s.scan(p, func(k, _ []byte) error {
			id := string(k[len(p):])
			if id > f.After && (f.Limit == 0 || len(ids) < f.Limit) {
				ids = append(ids, id)
			}
			return nil
		})
	}
	var err error
	switch {
	case f.GoalID != "":
		err = collect(key(pTaskByGoal, f.GoalID, ""))
	case f.State != "":
		err = collect(key(pTaskByWS, ws, f.State, ""))
	default:
		for _, st := range domain.TaskStates {
			if err = collect(key(pTaskByWS, ws, st, "")); err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([]*domain.Task, 0, len(ids))
	for _, id := range ids {
		t, err := s.Task(id)
		if err != nil {
			return nil, err
		}
		if t == nil || t.Workspace != ws || (f.State != "" && t.State != f.State) {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// History returns the stored events of one aggregate, oldest first, each
// verified against the previous one's hash.
func (s *Store) History(aggType, id string) ([]eventstore.Event, error) {
	var out []eventstore.Event
	prev := ""
	err := s.scan(key(pHistory, aggType, id, ""), func(_, v []byte) error {
		var e eventstore.Event
		if err := json.Unmarshal(v, &e); err != nil {
			return err
		}
		e.Raw = append([]byte(nil), v...)
		if e.PrevHash != prev {
			return &ChainError{AggregateType: aggType, AggregateID: id, Version: e.Version,
				Problem: "previous-event hash does not match"}
		}
		prev = e.Hash()
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("projections: history of %s %s: %w", aggType, id, err)
	}
	return out, nil
}
