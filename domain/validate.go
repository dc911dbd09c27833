package domain

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/dwr-run/dwr/schemas"
)

// Bounds on what a command may hold. The edge bounds message size and
// nesting before decoding; these bound the decoded fields.
const (
	MaxTitle        = 200
	MaxText         = 10_000
	MaxCriteria     = 100
	MaxPlanTasks    = 1_000
	MaxDependencies = MaxPlanTasks // a join over a whole plan
	MaxInputBytes   = 256 << 10
	MaxReason       = 2_000
	MaxArtifacts    = 1_000
	// MaxPendingSignals bounds the signals a task keeps before it waits for
	// them, and MaxPendingSignalBytes their payloads together: a signal
	// beyond either is refused, the ones kept stay.
	MaxPendingSignals     = 16
	MaxPendingSignalBytes = MaxInputBytes
)

func checkText(field, s string, max int, required bool) error {
	if required && s == "" {
		return invalid(field, "is required")
	}
	if !utf8.ValidString(s) {
		return invalid(field, "is not valid UTF-8")
	}
	if n := schemas.TextSize(s); n > max {
		return invalid(field, "is %d bytes long; at most %d are allowed", n, max)
	}
	return nil
}

// checkName returns nil for a valid name (ValidName), else invalid naming
// field and what the name is of ("queue", "approver").
func checkName(field, what, name string) error {
	if ValidName(name) {
		return nil
	}
	return invalid(field, "%s %q is not a valid name: use 1-63 lower-case letters, digits, '_' or '-'", what, name)
}

// ValidateSpec checks one task spec; field is the JSON pointer of the spec in
// its command.
func ValidateSpec(field string, s TaskSpec, env *Envelope) error {
	if err := checkName(field+"/queue", "queue", s.Queue); err != nil {
		return err
	}
	if env != nil && len(env.Permissions.Queues) > 0 && !slices.Contains(env.Permissions.Queues, s.Queue) {
		return &Error{Code: CodeForbidden, Field: field + "/queue",
			Message: fmt.Sprintf("queue %q is not permitted by the goal's envelope (permitted: %v)", s.Queue, env.Permissions.Queues)}
	}
	if err := checkText(field+"/title", s.Title, MaxTitle, false); err != nil {
		return err
	}
	if schemas.PayloadSize(s.Input) > MaxInputBytes {
		return invalid(field+"/input", "is %d bytes; at most %d are allowed (store larger inputs as artifacts)", schemas.PayloadSize(s.Input), MaxInputBytes)
	}
	if len(s.DependsOn) > MaxDependencies {
		return invalid(field+"/depends_on", "has %d entries; at most %d are allowed", len(s.DependsOn), MaxDependencies)
	}
	if r := s.Retry; r != nil {
		switch {
		case r.MaxAttempts < 0 || r.MaxAttempts > 1000:
			return invalid(field+"/retry/max_attempts", "must be between 1 and 1000")
		case r.InitialBackoff < 0:
			return invalid(field+"/retry/initial_backoff", "must not be negative")
		case r.MaxBackoff < 0:
			return invalid(field+"/retry/max_backoff", "must not be negative")
		case r.Multiplier != 0 && (r.Multiplier < 1 || r.Multiplier > 100):
			return invalid(field+"/retry/multiplier", "must be between 1 and 100")
		}
	}
	if s.Timeout < 0 {
		return invalid(field+"/timeout", "must not be negative")
	}
	if err := checkPriority(field+"/priority", s.Priority, true); err != nil {
		return err
	}
	if v := s.Verification; v != nil {
		if !ValidName(v.Queue) {
			return invalid(field+"/verification/queue", "queue %q is not a valid name", v.Queue)
		}
		verdicts := []string{VerdictRetry, VerdictReject, VerdictReview}
		if v.OnFail != "" && !slices.Contains(verdicts, v.OnFail) {
			return invalid(field+"/verification/on_fail", "%q is not one of retry, reject, review", v.OnFail)
		}
		if v.OnInconclusive != "" && !slices.Contains(verdicts, v.OnInconclusive) {
			return invalid(field+"/verification/on_inconclusive", "%q is not one of retry, reject, review", v.OnInconclusive)
		}
	}
	if a := s.Approval; a != nil {
		if err := validateApproval(field+"/approval", ApprovalRequest{Basis: a.Basis, Role: a.Role, Responses: a.Responses,
			Branches: a.Branches, OnExpiry: a.OnExpiry, EscalateTo: a.EscalateTo, ExpiresIn: a.ExpiresIn, Quorum: a.Quorum}); err != nil {
			return err
		}
	}
	return nil
}

// planOrder checks a plan's keys and dependencies and returns the indexes of
// its tasks in an order where every task comes after its dependencies.
func planOrder(tasks []TaskSpec) ([]int, error) {
	if len(tasks) == 0 {
		return nil, invalid("/tasks", "a plan needs at least one task")
	}
	if len(tasks) > MaxPlanTasks {
		return nil, invalid("/tasks", "has %d tasks; at most %d are allowed", len(tasks), MaxPlanTasks)
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		f := fmt.Sprintf("/tasks/%d/key", i)
		if !ValidKey(t.Key) {
			return nil, invalid(f, "key %q is not valid: use 1-128 letters, digits, '_', '.' or '-'", t.Key)
		}
		if j, dup := index[t.Key]; dup {
			return nil, invalid(f, "key %q is also used by task %d", t.Key, j)
		}
		index[t.Key] = i
	}
	for i, t := range tasks {
		for j, d := range t.DependsOn {
			if _, ok := index[d]; !ok {
				return nil, invalid(fmt.Sprintf("/tasks/%d/depends_on/%d", i, j), "no task in the plan has key %q", d)
			}
			if d == t.Key {
				return nil, invalid(fmt.Sprintf("/tasks/%d/depends_on/%d", i, j), "task %q depends on itself", d)
			}
		}
	}
	// Repeatedly take every task whose dependencies are placed, in plan order.
	order := make([]int, 0, len(tasks))
	done := make([]bool, len(tasks))
	for len(order) < len(tasks) {
		progressed := false
		for i, t := range tasks {
			if done[i] {
				continue
			}
			ready := true
			for _, d := range t.DependsOn {
				if !done[index[d]] {
					ready = false
					break
				}
			}
			if ready {
				done[i], progressed = true, true
				order = append(order, i)
			}
		}
		if !progressed {
			i := onCycle(tasks, index, done)
			return nil, invalid(fmt.Sprintf("/tasks/%d/depends_on", i), "task %q is part of a dependency cycle", tasks[i].Key)
		}
	}
	return order, nil
}

// onCycle returns the index of a task on a dependency cycle, given that no
// task left unplaced (not done) can be placed. Each such task has an unplaced
// dependency, so following them from any unplaced task must come back to a
// task already seen: that repeats a cycle, and the cycle's first task in plan
// order is returned. A task that merely depends on a cycle is not named.
func onCycle(tasks []TaskSpec, index map[string]int, done []bool) int {
	seen := map[int]int{} // task -> step at which the walk reached it
	i := slices.Index(done, false)
	for step := 0; ; step++ {
		if at, ok := seen[i]; ok {
			first := i
			for j, s := range seen {
				if s >= at && j < first {
					first = j
				}
			}
			return first
		}
		seen[i] = step
		for _, d := range tasks[i].DependsOn {
			if !done[index[d]] {
				i = index[d]
				break
			}
		}
	}
}

// checkPriority refuses a priority (TaskSpec.Priority, a goal's) out of
// its bounds, naming field; 0 (none given) only when optional.
func checkPriority(field string, p int, optional bool) error {
	if (p == 0 && optional) || (p >= schemas.MinPriority && p <= schemas.MaxPriority) {
		return nil
	}
	return invalid(field, "must be between %d (first) and %d (last) (got %d)", schemas.MinPriority, schemas.MaxPriority, p)
}
