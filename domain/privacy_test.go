package domain

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// goal.shred records a goal's data key destroyed and cancels the goal; only
// a goal with its own key may be shredded alone. workspace.shred records
// the workspace's.
func TestShred(t *testing.T) {
	w := setup(t)
	shared := w.createGoal(Envelope{})
	e := w.refused(&ShredGoal{GoalID: shared}, CodeConflict)
	require.Contains(t, e.Message, "privacy key goal")
	e = w.refused(&CreateGoal{GoalID: w.newID(), Title: "t", Envelope: Envelope{Privacy: &schemas.Privacy{Key: "customer"}}}, CodeInvalid)
	require.Equal(t, "/envelope/privacy/key", e.Field)

	own := w.createGoal(Envelope{Privacy: &schemas.Privacy{Key: schemas.PrivacyKeyGoal}})
	ids, _ := w.plan(own, spec("a"), spec("b", "a"))
	w.claim(ids["a"])
	out := w.must(&ShredGoal{GoalID: own, Reason: "erasure request"})
	require.Equal(t, []string{"goal.shredded", "goal.cancelled"}, events(out, own))
	require.True(t, w.goal(own).Shredded)
	require.Equal(t, StateCancelled, w.state(ids["a"]))
	require.True(t, w.must(&ShredGoal{GoalID: own}).Reply.Duplicate, "shredded already")

	out = w.must(&ShredWorkspace{Reason: "the customer left"})
	require.Equal(t, []string{"workspace.shredded"}, events(out, w.ws))
	require.True(t, w.workspace().Shredded)
	require.True(t, w.must(&ShredWorkspace{}).Reply.Duplicate)
	w.requireReplays()
}

// With a retention, a goal gets its own key (so that the retention can
// shred it) unless its envelope names the workspace's.
func TestRetentionGivesGoalsTheirOwnKeys(t *testing.T) {
	w := setup(t)
	before := w.createGoal(Envelope{})
	require.False(t, w.goal(before).Envelope.OwnKey())
	require.Equal(t, "/retain_ended", w.refused(&ConfigureWorkspace{RetainEnded: -1}, CodeInvalid).Field)
	w.must(&ConfigureWorkspace{RetainEnded: schemas.Duration(time.Hour)})
	require.Equal(t, schemas.Duration(time.Hour), w.workspace().RetainEnded)
	require.True(t, w.must(&ConfigureWorkspace{RetainEnded: schemas.Duration(time.Hour)}).Reply.Duplicate, "the same again")
	require.True(t, w.goal(w.createGoal(Envelope{})).Envelope.OwnKey())
	shared := w.createGoal(Envelope{Privacy: &schemas.Privacy{Key: schemas.PrivacyKeyWorkspace}})
	require.False(t, w.goal(shared).Envelope.OwnKey(), "the envelope's choice stands")
}
