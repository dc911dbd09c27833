package executors

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// Only a first delivery of a fresh item that carries its task, ready for
// exactly the item's attempt, runs before its claim.
func TestWhichItemsRunBeforeTheirClaim(t *testing.T) {
	const id = "01Q3G99648H87N2YG8NR952X83"
	item := func(edit func(*schemas.WorkItem)) *delivery {
		it := schemas.WorkItem{Kind: schemas.WorkKindExecute, TaskID: id, Workspace: "default", Queue: "q", Attempt: 2,
			Task: &schemas.Task{ID: id, Workspace: "default", Spec: schemas.TaskSpec{Queue: "q"}, State: schemas.StateReady,
				Attempts: []schemas.Attempt{{N: 1, State: schemas.AttemptStateFailed}}}}
		if edit != nil {
			edit(&it)
		}
		return &delivery{item: it, delivered: 1}
	}
	now := time.Now()
	require.True(t, item(nil).lazyItem(now))
	require.False(t, item(nil).lazyItem(now.Add(-2*lazyMaxAge)), "it waited in the stream: claim first")
	d := item(nil)
	d.delivered = 2
	require.False(t, d.lazyItem(now), "a redelivery claims first (it may supersede)")
	for name, edit := range map[string]func(*schemas.WorkItem){
		"no task":           func(it *schemas.WorkItem) { it.Task = nil },
		"another task":      func(it *schemas.WorkItem) { it.Task.ID = "01Q3G99648H87N2YG8NR952X84" },
		"another workspace": func(it *schemas.WorkItem) { it.Task.Workspace = "other" },
		"another queue":     func(it *schemas.WorkItem) { it.Task.Spec.Queue = "other" },
		"not ready":         func(it *schemas.WorkItem) { it.Task.State = schemas.StateRunning },
		"another attempt":   func(it *schemas.WorkItem) { it.Attempt = 3 },
	} {
		require.False(t, item(edit).lazyItem(now), name)
	}
}
