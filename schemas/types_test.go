package schemas_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

func TestDurationJSON(t *testing.T) {
	var d schemas.Duration
	require.NoError(t, json.Unmarshal([]byte(`"1m30s"`), &d))
	require.Equal(t, 90*time.Second, d.D())
	require.NoError(t, json.Unmarshal([]byte(`2.5`), &d))
	require.Equal(t, 2500*time.Millisecond, d.D())
	require.NoError(t, json.Unmarshal([]byte(`"0s"`), &d))
	require.Zero(t, d.D())
	require.Error(t, json.Unmarshal([]byte(`"soon"`), &d))
	require.Error(t, json.Unmarshal([]byte(`""`), &d), "the schemas' Duration pattern refuses an empty string too")
	require.Error(t, json.Unmarshal([]byte(`true`), &d))
	require.Error(t, json.Unmarshal([]byte(`{}`), &d))
	b, err := json.Marshal(schemas.Duration(3 * time.Second))
	require.NoError(t, err)
	require.Equal(t, `"3s"`, string(b))
}

// The accessors read a task as the service and the SDK both need to.
func TestTaskAccessors(t *testing.T) {
	tk := &schemas.Task{State: schemas.StateRunning, Versioned: schemas.Versioned{Commands: []string{"c1"}},
		Attempts:  []schemas.Attempt{{N: 1, State: schemas.AttemptStateAbandoned}, {N: 2, State: schemas.AttemptStateRunning}},
		Approvals: []schemas.Approval{{ID: "T-1", Decision: &schemas.ApprovalDecision{SignedResponse: schemas.SignedResponse{Response: "approve"}}}, {ID: "T-2", State: schemas.ApprovalStatePending}}}
	require.Equal(t, 2, tk.Current().N)
	require.Equal(t, 2, tk.Running().N)
	require.Equal(t, 1, tk.Attempt(1).N)
	require.Nil(t, tk.Attempt(3))
	require.Equal(t, "T-2", tk.Approval("T-2").ID)
	require.Equal(t, "T-1", tk.LastDecision().ID)
	require.Nil(t, tk.PendingApproval(), "a running task waits on nothing")
	require.True(t, tk.HasCommand("c1"))
	require.False(t, tk.HasCommand(""))

	c := tk.Clone()
	c.Attempts[1].State = schemas.AttemptStateSucceeded
	c.Approvals[0].Decision.Response = "reject"
	require.Equal(t, schemas.AttemptStateRunning, tk.Running().State, "a clone shares no attempt")
	require.Equal(t, "approve", tk.Approvals[0].Decision.Response, "a clone shares no decision")
	require.Nil(t, c.Running())

	tk.State, tk.Wait = schemas.StateWaiting, &schemas.Wait{Kind: schemas.WaitApproval, ApprovalID: "T-2"}
	require.Equal(t, "T-2", tk.PendingApproval().ID)
	require.Nil(t, (&schemas.Task{}).Current())
}

func TestErrorsMatchTheSentinelOfTheirCode(t *testing.T) {
	sentinels := map[string]error{schemas.CodeInvalid: schemas.ErrInvalid, schemas.CodeNotFound: schemas.ErrNotFound,
		schemas.CodeConflict: schemas.ErrConflict, schemas.CodeForbidden: schemas.ErrForbidden, schemas.CodeTooLarge: schemas.ErrTooLarge,
		schemas.CodeUnavailable: schemas.ErrUnavailable, schemas.CodeInternal: schemas.ErrInternal}
	require.Len(t, sentinels, len(schemas.Codes))
	for _, code := range schemas.Codes {
		err := error(&schemas.Error{Code: code, Message: "m"})
		for other, s := range sentinels {
			require.Equal(t, other == code, errors.Is(err, s), "%s is %s", code, other)
		}
	}
}
