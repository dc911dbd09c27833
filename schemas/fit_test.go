package schemas_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

// payload returns a JSON string of about n bytes.
func payload(n int) json.RawMessage {
	return json.RawMessage(strconv.Quote(strings.Repeat("x", n)))
}

// longHistory is a task that ran four attempts with 100 KiB results, was
// judged three times with 50 KiB of evidence, asked two approvals with
// 20 KiB bases, and keeps 30 KiB of pending signals and many command ids.
func longHistory() *schemas.Task {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	t := &schemas.Task{ID: taskID, Workspace: "default", State: schemas.StateRunning,
		Spec:       schemas.TaskSpec{Queue: "q", Input: payload(10 << 10)},
		Checkpoint: payload(10 << 10), Versioned: schemas.Versioned{CreatedAt: now, UpdatedAt: now, Version: 40}}
	for n := 1; n <= 4; n++ {
		a := schemas.Attempt{N: n, Executor: "e", OperationKey: "k", State: schemas.AttemptStateSucceeded, StartedAt: now, Result: payload(100 << 10)}
		if n == 4 {
			a.State, a.Result = schemas.AttemptStateRunning, nil
		}
		t.Attempts = append(t.Attempts, a)
	}
	t.Attempts[2].ModelSteps = []schemas.ModelStep{{Parsed: payload(5 << 10)}}
	for n := 1; n <= 3; n++ {
		t.Verifications = append(t.Verifications, schemas.Verification{VerificationID: fmt.Sprintf("%032x", n),
			Verdict: schemas.Verdict{Attempt: n, Outcome: "FAIL", Evidence: payload(50 << 10), Verifier: "v", ResultDigest: "d"}})
	}
	for n := 1; n <= 2; n++ {
		t.Approvals = append(t.Approvals, schemas.Approval{ID: fmt.Sprintf("%s-%d", taskID, n), TaskID: taskID,
			Action: json.RawMessage(`{"deploy":true}`), ActionDigest: "sha256:" + strings.Repeat("0", 64), Basis: payload(20 << 10),
			Responses: []string{"approve"}, Branches: map[string]string{"approve": "resume"}, State: "decided", RequestedAt: now})
	}
	t.PendingSignals = []schemas.Signal{{Name: "more", Payload: payload(30 << 10)}}
	for n := range 500 {
		t.Commands = append(t.Commands, fmt.Sprintf("executor-1/%026d", n))
	}
	return t
}

// at returns what JSON pointer ptr names in doc, and whether it names
// anything.
func at(doc any, ptr string) (any, bool) {
	for _, tok := range strings.Split(ptr, "/")[1:] {
		switch v := doc.(type) {
		case map[string]any:
			x, ok := v[tok]
			if !ok {
				return nil, false
			}
			doc = x
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i >= len(v) {
				return nil, false
			}
			doc = v[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

func decoded(t *testing.T, b []byte) any {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal(b, &doc))
	return doc
}

func TestFitTaskLeavesOutTheOldestHistoryFirst(t *testing.T) {
	task := longHistory()
	before, err := json.Marshal(task)
	require.NoError(t, err)
	whole := decoded(t, before)

	same, b, err := schemas.FitTask(task, len(before))
	require.NoError(t, err)
	require.Same(t, task, same, "a task within the bound is the task itself")
	require.Equal(t, before, b)

	order := []string{"/commands", "/pending_signals", "/attempts/0/result", "/attempts/1/result", "/attempts/2/result",
		"/attempts/2/model_steps", "/verifications/0/evidence", "/verifications/1/evidence", "/approvals/0/basis", "/approvals/1/basis"}
	for _, max := range []int{len(before) - 1, 400 << 10, 300 << 10, 200 << 10, 150 << 10, 100 << 10, 60 << 10, 1 << 10} {
		fit, b, err := schemas.FitTask(task, max)
		require.NoError(t, err)
		require.NotEmpty(t, fit.Omitted, "max %d", max)
		require.Equal(t, order[:len(fit.Omitted)], fit.Omitted, "max %d: the oldest history goes first", max)
		if len(fit.Omitted) < len(order) {
			require.LessOrEqual(t, len(b), max, "max %d: the task fits once enough is left out", max)
			require.Greater(t, len(b)+100<<10, max, "max %d: no more is left out than needed", max)
		}
		doc := decoded(t, b)
		for _, ptr := range fit.Omitted {
			_, held := at(whole, ptr)
			require.True(t, held, "%s names a part of the task", ptr)
			_, kept := at(doc, ptr)
			require.False(t, kept, "%s is left out", ptr)
		}
		// What an attempt runs from stays, whatever the bound.
		for _, ptr := range []string{"/spec/input", "/checkpoint", "/verifications/2/evidence", "/approvals/0/action", "/attempts/3"} {
			_, kept := at(doc, ptr)
			require.True(t, kept, "max %d: %s stays", max, ptr)
		}
		require.Len(t, fit.Attempts, 4, "every attempt stays, with its number and state")
	}
	after, err := json.Marshal(task)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "the task fitted is not changed")
}

func TestAFittedTaskIsAValidTask(t *testing.T) {
	fit, b, err := schemas.FitTask(longHistory(), 100<<10)
	require.NoError(t, err)
	require.NotEmpty(t, fit.Omitted)
	reply := fmt.Sprintf(`{"ok":true,"result":{"id":%q,"version":40,"task":%s}}`, taskID, b)
	require.NoError(t, schemas.Validate(schemas.PathReply, []byte(reply)))
}
