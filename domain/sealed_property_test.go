package domain

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/dwr-run/dwr/schemas"
)

// seal stands for the service's sealing (eventstore.DataKey.Seal) in a
// test of the domain: a deterministic, injective map of a payload to a
// value of the sealed form, whose size (schemas.PayloadSize) is the
// payload's. The domain must decide the same on it as on the payload.
func seal(p json.RawMessage) json.RawMessage {
	if len(p) == 0 || string(p) == "null" {
		return p
	}
	body := make([]byte, 0, len(p)+schemas.SealOverhead)
	body = append(body, make([]byte, 24)...)
	body = append(body, p...)
	body = append(body, make([]byte, 16)...)
	return json.RawMessage(`"` + schemas.SealedPrefix + "w:" + base64.RawURLEncoding.EncodeToString(body) + `"`)
}

// sealedCommand returns cmd with every payload the service seals sealed
// (privacy.seal's fields).
func sealedCommand(cmd Command) Command {
	specs := func(in []TaskSpec) []TaskSpec {
		out := make([]TaskSpec, len(in))
		for i, s := range in {
			s.Input = seal(s.Input)
			out[i] = s
		}
		return out
	}
	switch c := cmd.(type) {
	case *CreateGoal:
		return changed(c, func(cp *CreateGoal) { cp.Tasks = specs(c.Tasks) })
	case *SubmitPlan:
		return changed(c, func(cp *SubmitPlan) { cp.Tasks = specs(c.Tasks) })
	case *CreateTask:
		return changed(c, func(cp *CreateTask) { cp.Spec.Input = seal(c.Spec.Input) })
	case *ReportSuccess:
		return changed(c, func(cp *ReportSuccess) { cp.Result = seal(c.Result) })
	case *SaveCheckpoint:
		return changed(c, func(cp *SaveCheckpoint) { cp.Checkpoint = seal(c.Checkpoint) })
	case *SendSignal:
		return changed(c, func(cp *SendSignal) { cp.Payload = seal(c.Payload) })
	case *RecordVerification:
		return changed(c, func(cp *RecordVerification) { cp.Evidence = seal(c.Evidence) })
	}
	return cmd
}

// changed returns a copy of command c with change made to it; c itself is
// left as it is, for the plain world to decide.
func changed[C any](c *C, change func(*C)) *C {
	cp := *c
	change(&cp)
	return &cp
}

// sealedState returns t as the sealed world should hold it: its payloads
// sealed, and its verdicts naming the digest of the sealed result they
// judged (the one a verify work item hands the verifier).
func sealedState(t *Task) *Task {
	t = t.Clone()
	t.Spec.Input, t.Checkpoint = seal(t.Spec.Input), seal(t.Checkpoint)
	for i := range t.Attempts {
		t.Attempts[i].Result = seal(t.Attempts[i].Result)
	}
	if t.Signal != nil {
		t.Signal.Payload = seal(t.Signal.Payload)
	}
	for i := range t.PendingSignals {
		t.PendingSignals[i].Payload = seal(t.PendingSignals[i].Payload)
	}
	for i := range t.Verifications {
		v := &t.Verifications[i]
		v.Evidence = seal(v.Evidence)
		if a := t.Attempt(v.Attempt); a != nil {
			v.ResultDigest = ResultDigest(a.Result)
			v.VerificationID = VerificationID(t.ID, v.Attempt, v.ResultDigest, v.Verifier, v.VerifierVersion)
		}
	}
	return t
}

// sameReply requires the sealed world's reply to be the plain world's, the
// task a claim carries with its payloads sealed.
func sameReply(t require.TestingT, plain, sealed Reply) {
	if plain.Task != nil && sealed.Task != nil {
		require.Equal(t, sealedState(plain.Task), sealed.Task)
	}
	plain.Task, sealed.Task = nil, nil
	require.Equal(t, plain, sealed)
}

// TestDecisionsOverSealedPayloadsAreTheSame runs random sequences of the
// commands that carry payloads — goals and plans (revised with the same or
// other inputs), standalone tasks, claims, checkpoints, reports, verdicts,
// waits, signals, cancellations — in two worlds, one given the payloads as
// sent and one given them sealed, and checks after every step that both
// decided the same: the same replies, the same events but for the
// payloads, and each task of the sealed world is the plain world's with
// its payloads sealed. So the domain never decides on a payload's content,
// and encryption changes no decision. More sequences: -rapid.checks=N.
func TestDecisionsOverSealedPayloadsAreTheSame(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		plain, sealed := setup(rt), setup(rt)
		var tasks, goals []string
		payload := func(label string) json.RawMessage {
			switch rapid.IntRange(0, 3).Draw(rt, label+" kind") {
			case 0:
				return nil
			case 1:
				return json.RawMessage(fmt.Sprint(rapid.IntRange(0, 3).Draw(rt, label)))
			case 2:
				return json.RawMessage(fmt.Sprintf(`{"n":%d}`, rapid.IntRange(0, 3).Draw(rt, label)))
			}
			return json.RawMessage(`"` + rapid.StringMatching(`[a-z]{0,5}`).Draw(rt, label) + `"`)
		}
		spec := func(key string, deps ...string) TaskSpec {
			s := TaskSpec{Key: key, Queue: "work", Input: payload("input"), DependsOn: deps}
			if rapid.IntRange(0, 3).Draw(rt, "verified") == 0 {
				s.Verification = &VerificationSpec{Queue: "checks"}
			}
			return s
		}
		plan := func() []TaskSpec {
			n := rapid.IntRange(1, 3).Draw(rt, "tasks")
			specs := []TaskSpec{spec("a")}
			for i := 1; i < n; i++ {
				specs = append(specs, spec(fmt.Sprint("k", i), "a"))
			}
			return specs
		}
		pick := func(ids []string, label string) (string, bool) {
			if len(ids) == 0 {
				return "", false
			}
			return rapid.SampledFrom(ids).Draw(rt, label), true
		}
		// run sends cmd to both worlds (sealed to the sealed one) and
		// requires the same decision.
		run := func(cmd Command) *Outcome {
			id := plain.nextCommandID()
			sealed.nextCommandID()
			po, perr := plain.runID(id, cmd)
			so, serr := sealed.runID(id, sealedCommand(cmd))
			require.Equal(rt, perr == nil, serr == nil, "both refuse, or neither: %v / %v", perr, serr)
			if perr != nil {
				require.Equal(rt, perr.Error(), serr.Error())
				return nil
			}
			sameReply(rt, po.Reply, so.Reply)
			require.Len(rt, so.Changes, len(po.Changes))
			for i := range po.Changes {
				require.Equal(rt, po.Changes[i].Event.EventType(), so.Changes[i].Event.EventType())
				require.Equal(rt, po.Changes[i].AggregateID, so.Changes[i].AggregateID)
			}
			return po
		}
		for step := range rapid.IntRange(1, 40).Draw(rt, "steps") {
			_ = step
			switch rapid.IntRange(0, 10).Draw(rt, "action") {
			case 0:
				g := plain.newID()
				sealed.newID()
				if out := run(&CreateGoal{GoalID: g, Title: "g", Tasks: plan()}); out != nil {
					goals = append(goals, g)
					for _, pt := range out.Reply.Tasks {
						tasks = append(tasks, pt.TaskID)
					}
				}
			case 1:
				if g, ok := pick(goals, "goal"); ok {
					if out := run(&SubmitPlan{GoalID: g, Tasks: plan()}); out != nil {
						for _, pt := range out.Reply.Tasks {
							tasks = append(tasks, pt.TaskID)
						}
					}
				}
			case 2:
				id := plain.newID()
				sealed.newID()
				if run(&CreateTask{TaskID: id, Spec: TaskSpec{Queue: "work", Input: payload("input")}}) != nil {
					tasks = append(tasks, id)
				}
			case 3, 4:
				if id, ok := pick(tasks, "claim"); ok {
					run(&ClaimTask{ClaimBody: ClaimBody{TaskID: id, Executor: "e"}})
				}
			case 5, 6:
				if id, ok := pick(tasks, "succeed"); ok {
					if a := plain.task(id).Running(); a != nil {
						run(&ReportSuccess{TaskID: id, Attempt: a.N, Result: payload("result")})
					}
				}
			case 7:
				if id, ok := pick(tasks, "checkpoint"); ok {
					if a := plain.task(id).Running(); a != nil {
						run(&SaveCheckpoint{TaskID: id, Attempt: a.N, Checkpoint: payload("checkpoint")})
					}
				}
			case 8:
				if id, ok := pick(tasks, "verify"); ok {
					if tk := plain.task(id); tk.State == StateVerifying {
						n := tk.Current().N
						outcome := rapid.SampledFrom([]string{OutcomePass, OutcomeFail, OutcomeInconclusive}).Draw(rt, "outcome")
						v := &RecordVerification{TaskID: id, Verdict: Verdict{Attempt: n, Outcome: outcome, Verifier: "v", Evidence: payload("evidence")}}
						pid, sid := plain.nextCommandID(), sealed.nextCommandID()
						require.Equal(rt, pid, sid)
						pv, sv := *v, *sealedCommand(v).(*RecordVerification)
						pv.ResultDigest = ResultDigest(tk.Current().Result)
						sv.ResultDigest = ResultDigest(sealed.task(id).Current().Result)
						po, perr := plain.runID(pid, &pv)
						so, serr := sealed.runID(sid, &sv)
						require.Equal(rt, perr == nil, serr == nil)
						if perr == nil {
							sameReply(rt, po.Reply, so.Reply)
						}
					}
				}
			case 9:
				if id, ok := pick(tasks, "signal"); ok {
					if a := plain.task(id).Running(); a != nil && rapid.Bool().Draw(rt, "wait first") {
						run(&WaitTask{TaskID: id, Attempt: a.N, Kind: WaitSignal, Signal: "s"})
					}
					run(&SendSignal{TaskID: id, Name: "s", Payload: payload("payload")})
				}
			case 10:
				if id, ok := pick(tasks, "cancel"); ok {
					run(&CancelTask{TaskID: id})
				}
			}
			plain.advance(time.Second)
			sealed.advance(time.Second)
			for _, id := range tasks {
				want, got := sealedState(plain.task(id)), sealed.task(id)
				require.Equal(rt, want, got, "task %s", id)
			}
			for _, id := range goals {
				require.Equal(rt, plain.goal(id), sealed.goal(id))
			}
		}
	})
}
