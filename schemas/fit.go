package schemas

import (
	"encoding/json"
	"fmt"
	"slices"
)

// MaxReplyTaskBytes bounds the task a claim's reply carries: a task whose
// history makes it larger is fitted to it (FitTask). Each of a task's
// payloads is bounded, their sum is not: without a bound a task that
// retried often enough with large results could no longer be claimed, its
// claim's record being larger than the log takes.
const MaxReplyTaskBytes = MaxItemTaskBytes

// FitTask returns t, with its JSON, when its JSON is at most max bytes;
// otherwise TrimTask's copy of it, with that copy's JSON. t is not changed.
func FitTask(t *Task, max int) (*Task, []byte, error) {
	b, err := json.Marshal(t)
	if err != nil || len(b) <= max {
		return t, b, err
	}
	f := TrimTask(t, len(b)-max)
	b, err = json.Marshal(f)
	return f, b, err
}

// TrimTask returns a copy of t whose JSON is about over bytes smaller: it
// leaves out, in this order and while more is to go, the command ids the
// task has applied, its pending signals, the results and model steps of its
// earlier attempts (every one but the latest, oldest first), the evidence of
// its earlier verifications (oldest first) and its approvals' bases (oldest
// first); the copy's Omitted names each part left out by its JSON pointer,
// and the events query still reads them. What an attempt runs from — the
// spec, the checkpoint, the signal, delegations, the latest attempt and
// verdict, every approval's action and decision — stays, so the copy can
// fall short of over. It returns t itself when over is not positive or
// nothing can be left out, and never changes t.
func TrimTask(t *Task, over int) *Task {
	if over <= 0 {
		return t
	}
	f := *t
	f.Omitted = slices.Clip(t.Omitted) // appending copies: t's stays as it is
	over += len(`,"omitted":[]`)
	// leave takes out a part of n bytes (its member name with it), naming
	// it in Omitted, which grows by its pointer.
	leave := func(ptr string, n int) {
		f.Omitted = append(f.Omitted, ptr)
		over -= n - len(ptr) - 3
	}
	if len(f.Commands) > 0 {
		leave("/commands", jsonSize(f.Commands)+len(`,"commands":`))
		f.Commands = nil
	}
	if over > 0 && len(f.PendingSignals) > 0 {
		leave("/pending_signals", jsonSize(f.PendingSignals)+len(`,"pending_signals":`))
		f.PendingSignals = nil
	}
	if over > 0 && len(f.Attempts) > 1 {
		f.Attempts = slices.Clone(f.Attempts)
		for i := 0; i < len(f.Attempts)-1 && over > 0; i++ {
			a := &f.Attempts[i]
			if len(a.Result) > 0 {
				leave(fmt.Sprintf("/attempts/%d/result", i), len(a.Result)+len(`,"result":`))
				a.Result = nil
			}
			if len(a.ModelSteps) > 0 {
				leave(fmt.Sprintf("/attempts/%d/model_steps", i), jsonSize(a.ModelSteps)+len(`,"model_steps":`))
				a.ModelSteps = nil
			}
		}
	}
	if over > 0 && len(f.Verifications) > 1 {
		f.Verifications = slices.Clone(f.Verifications)
		for i := 0; i < len(f.Verifications)-1 && over > 0; i++ {
			if v := &f.Verifications[i]; len(v.Evidence) > 0 {
				leave(fmt.Sprintf("/verifications/%d/evidence", i), len(v.Evidence)+len(`,"evidence":`))
				v.Evidence = nil
			}
		}
	}
	if over > 0 && len(f.Approvals) > 0 {
		f.Approvals = slices.Clone(f.Approvals)
		for i := 0; i < len(f.Approvals) && over > 0; i++ {
			if a := &f.Approvals[i]; len(a.Basis) > 0 {
				leave(fmt.Sprintf("/approvals/%d/basis", i), len(a.Basis)+len(`,"basis":`))
				a.Basis = nil
			}
		}
	}
	if len(f.Omitted) == len(t.Omitted) {
		return t
	}
	return &f
}

// jsonSize returns the length of v's JSON (0 when it has none).
func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}
