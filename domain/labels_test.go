package domain

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A goal's labels: given at creation, set and removed by goal.label in any
// state of the goal, each change one goal.labeled event with all of them.
func TestGoalLabels(t *testing.T) {
	w := setup(t)
	id := w.newID()
	out := w.must(&CreateGoal{GoalID: id, Title: "Onboard ACME", Labels: Labels{"customer": "acme", "tier": "gold"}})
	require.Equal(t, Labels{"customer": "acme", "tier": "gold"}, eventOf[*GoalCreated](t, out, id).Labels)
	require.Equal(t, Labels{"customer": "acme", "tier": "gold"}, w.goal(id).Labels)

	out = w.must(&LabelGoal{GoalID: id, Set: Labels{"tier": "silver", "ticket": "T-42"}, Remove: []string{"customer", "absent"}})
	require.Equal(t, []string{"goal.labeled"}, events(out, id))
	require.Equal(t, &GoalLabeled{Labels: Labels{"tier": "silver", "ticket": "T-42"}}, out.Changes[0].Event, "the event holds every label after it")
	require.Equal(t, Labels{"tier": "silver", "ticket": "T-42"}, w.goal(id).Labels)
	require.False(t, out.Reply.Duplicate)

	// What changes nothing records nothing, and says so.
	out = w.must(&LabelGoal{GoalID: id, Set: Labels{"tier": "silver"}, Remove: []string{"customer"}})
	require.Empty(t, out.Changes)
	require.True(t, out.Reply.Duplicate)

	// A retry of a change answers as the first did, once.
	cmdID := w.nextCommandID()
	_, err := w.runID(cmdID, &LabelGoal{GoalID: id, Set: Labels{"stage": "2"}})
	require.NoError(t, err)
	out = w.duplicate(cmdID, &LabelGoal{GoalID: id, Set: Labels{"stage": "2"}})
	require.True(t, out.Reply.Duplicate)

	// An ended goal is labeled still; removing every label leaves none.
	w.must(&CancelGoal{GoalID: id})
	out = w.must(&LabelGoal{GoalID: id, Remove: []string{"tier", "ticket", "stage"}})
	require.Equal(t, &GoalLabeled{}, out.Changes[0].Event)
	require.Nil(t, w.goal(id).Labels)
	require.Equal(t, GoalStateCancelled, w.goal(id).State)
	w.requireReplays()
	w.requireReplaysFromWire()
}

func TestGoalLabelsBounds(t *testing.T) {
	w := setup(t)
	many := Labels{}
	for i := range MaxLabels {
		many[fmt.Sprintf("l%02d", i)] = strings.Repeat("v", MaxLabelValue)
	}
	id := w.newID()
	w.must(&CreateGoal{GoalID: id, Title: "At the bounds", Labels: many})
	require.Len(t, w.goal(id).Labels, MaxLabels)

	tooMany := Labels{"one-more": ""}
	for k, v := range many {
		tooMany[k] = v
	}
	for _, tc := range []struct {
		cmd   Command
		field string
	}{
		{&CreateGoal{GoalID: w.newID(), Title: "t", Labels: tooMany}, "/labels"},
		{&CreateGoal{GoalID: w.newID(), Title: "t", Labels: Labels{"Customer": "acme"}}, "/labels/Customer"},
		{&CreateGoal{GoalID: w.newID(), Title: "t", Labels: Labels{"a/b": "x"}}, "/labels/a~1b"},
		{&CreateGoal{GoalID: w.newID(), Title: "t", Labels: Labels{"note": strings.Repeat("é", MaxLabelValue/2+1)}}, "/labels/note"},
		{&CreateGoal{GoalID: w.newID(), Title: "t", Labels: Labels{"note": "\xff"}}, "/labels/note"},
		{&LabelGoal{GoalID: id}, "/set"},
		{&LabelGoal{GoalID: id, Set: Labels{"l00": "x"}, Remove: []string{"l00"}}, "/remove/0"},
		{&LabelGoal{GoalID: id, Set: Labels{"one-more": "x"}}, "/set"},
		{&LabelGoal{GoalID: id, Remove: []string{"ok", "Not-A-Name"}}, "/remove/1"},
		{&LabelGoal{GoalID: id, Set: Labels{"-x": "y"}}, "/set/-x"},
	} {
		require.Equal(t, tc.field, w.refused(tc.cmd, CodeInvalid).Field, "%+v", tc.cmd)
	}
	require.Equal(t, many, w.goal(id).Labels, "a refusal changes nothing")
	// Replacing a label at the bound is no new label.
	w.must(&LabelGoal{GoalID: id, Set: Labels{"l00": "x"}, Remove: []string{"l01"}})
	w.must(&LabelGoal{GoalID: id, Set: Labels{"one-more": "y"}})
	require.Len(t, w.goal(id).Labels, MaxLabels)
	require.Equal(t, CodeNotFound, w.refused(&LabelGoal{GoalID: w.newID(), Set: Labels{"a": "b"}}, CodeNotFound).Code)
}

// A ritual's goal template and a schedule's goal may carry labels; a run's
// labels go over the template's.
func TestLabelsFromRitualsAndSchedules(t *testing.T) {
	w := setup(t)
	def := onboard()
	def.Goal = json.RawMessage(`{"title": "Onboard ${customer}", "labels": {"customer": "${customer}", "kind": "onboarding"}}`)
	w.must(def)
	id := w.newID()
	w.must(&RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "ACME"}`), GoalID: id, Labels: Labels{"kind": "rerun", "ticket": "T-7"}})
	require.Equal(t, Labels{"customer": "ACME", "kind": "rerun", "ticket": "T-7"}, w.goal(id).Labels)
	require.Equal(t, "/labels/Bad", w.refused(&RunRitual{Name: "onboard", Params: json.RawMessage(`{"customer": "ACME"}`),
		GoalID: w.newID(), Labels: Labels{"Bad": "x"}}, CodeInvalid).Field)

	s := report("daily", "24h")
	s.Goal = json.RawMessage(`{"title": "Report", "labels": {"source": "schedule"}}`)
	w.must(s)
	w.advance(24 * time.Hour)
	out := w.fire("daily")
	fired := lastEvent[*ScheduleFired](out)
	require.Equal(t, Labels{"source": "schedule"}, w.goal(fired.GoalID).Labels)
	w.requireReplays()
}

// A standalone task's labels: given by task.create, changed by task.label
// in any state, as a goal's.
func TestTaskLabels(t *testing.T) {
	w := setup(t)
	id := w.newID()
	out := w.must(&CreateTask{TaskID: id, Spec: TaskSpec{Queue: "mail"}, Labels: Labels{"customer": "acme"}})
	require.Equal(t, Labels{"customer": "acme"}, eventOf[*TaskCreated](t, out, id).Labels)
	require.Equal(t, Labels{"customer": "acme"}, w.task(id).Labels)

	out = w.must(&LabelTask{TaskID: id, Set: Labels{"ticket": "T-9"}, Remove: []string{"customer"}})
	require.Equal(t, &TaskLabeled{Labels: Labels{"ticket": "T-9"}}, out.Changes[0].Event)
	require.Equal(t, StateReady, out.Reply.State, "labels change nothing else")
	require.True(t, w.must(&LabelTask{TaskID: id, Set: Labels{"ticket": "T-9"}}).Reply.Duplicate)
	w.must(&CancelTask{TaskID: id})
	w.must(&LabelTask{TaskID: id, Remove: []string{"ticket"}})
	require.Nil(t, w.task(id).Labels, "an ended task is labeled still")

	require.Equal(t, "/labels/Bad", w.refused(&CreateTask{TaskID: w.newID(), Spec: TaskSpec{Queue: "mail"}, Labels: Labels{"Bad": "x"}}, CodeInvalid).Field)
	require.Equal(t, "/set", w.refused(&LabelTask{TaskID: id}, CodeInvalid).Field)
	require.Equal(t, CodeNotFound, w.refused(&LabelTask{TaskID: w.newID(), Set: Labels{"a": "b"}}, CodeNotFound).Code)
	w.requireReplays()
	w.requireReplaysFromWire()
}
