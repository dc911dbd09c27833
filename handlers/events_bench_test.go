package handlers_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// BenchmarkEventsQuery measures the events query of one task with 24
// events, each from a record of its own (a claim and 22 checkpoints),
// through NATS on a service with the JetStream log, as `dwr events` asks
// it. One op is one page of all 24 events.
func BenchmarkEventsQuery(b *testing.B) {
	st := servicetest.Start(b, b.TempDir(), servicetest.Options{})
	c := st.Client("default")
	task := c.CreateTask(b, map[string]any{"queue": "q"})
	var claim struct {
		Token string `json:"token"`
	}
	require.NoError(b, json.Unmarshal(c.Command(b, "task.claim", map[string]any{"task_id": task, "executor": "e"}), &claim))
	for i := range 22 {
		c.Command(b, "task.checkpoint", map[string]any{"task_id": task, "attempt": 1, "token": claim.Token,
			"checkpoint": map[string]any{"step": i, "note": "a checkpoint of a few dozen bytes"}})
	}
	var page []json.RawMessage
	c.Query(b, "events", schemas.Query{ID: task, Limit: 100}, &page)
	require.Len(b, page, 24)
	b.ResetTimer()
	for b.Loop() {
		c.Query(b, "events", schemas.Query{ID: task, Limit: 100}, &page)
	}
}
