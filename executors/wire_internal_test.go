package executors

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/schemas"
)

func TestRunningFromItem(t *testing.T) {
	att := func(n int, state string) schemas.Attempt {
		return schemas.Attempt{N: n, State: state}
	}
	cases := []struct {
		name        string
		state       string
		attempts    []schemas.Attempt
		itemAttempt int
		want        int // 0: not this item's
	}{
		{"first claim of the item runs", "running", []schemas.Attempt{att(1, "running")}, 1, 1},
		{"a redelivery superseded the first holder", "running", []schemas.Attempt{att(1, "abandoned"), att(2, "running")}, 1, 2},
		{"after a failure the running attempt came from another item", "running", []schemas.Attempt{att(1, "failed"), att(2, "running")}, 1, 0},
		{"a later item's attempt after abandonments", "running", []schemas.Attempt{att(1, "failed"), att(2, "abandoned"), att(3, "running")}, 2, 3},
		{"an older attempt than the item's", "running", []schemas.Attempt{att(1, "running")}, 2, 0},
		{"not running", "backoff", []schemas.Attempt{att(1, "failed")}, 1, 0},
		{"accepted", "accepted", []schemas.Attempt{att(1, "succeeded")}, 1, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := &schemas.Task{State: tc.state, Attempts: tc.attempts}
			a, ok := runningFromItem(ts, tc.itemAttempt)
			if tc.want == 0 {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			require.Equal(t, tc.want, a.N)
		})
	}
}

func TestClipKeepsValidUTF8WithinTheLimit(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	got := clip(s, 5)
	require.Equal(t, "éé", got)
	require.True(t, utf8.ValidString(clip("a\xffb", 10)))
	require.Equal(t, "abc", clip("abc", 10))
}

func TestWorkItemCheckNamesEveryProblem(t *testing.T) {
	it := schemas.WorkItem{Kind: "verify", Workspace: "other", Queue: "q2"}
	err := checkItem(&it, "default", "q", schemas.WorkKindExecute)
	require.Error(t, err)
	for _, want := range []string{"kind", "task_id", "workspace", "queue", "attempt"} {
		require.Contains(t, err.Error(), want)
	}
	ok := schemas.WorkItem{Kind: schemas.WorkKindExecute, TaskID: "T", Workspace: "default", Queue: "q", Attempt: 1}
	require.NoError(t, checkItem(&ok, "default", "q", schemas.WorkKindExecute))
	v := schemas.WorkItem{Kind: schemas.WorkKindVerify, TaskID: "T", Workspace: "default", Queue: "q", Attempt: 1}
	require.NoError(t, checkItem(&v, "default", "q", schemas.WorkKindVerify))
	require.Error(t, checkItem(&v, "default", "q", schemas.WorkKindExecute), "a worker does not run verify items")
}

func TestApprovalRequestBody(t *testing.T) {
	j := &Job{TaskID: "01J00000000000000000000000", Attempt: 3, Token: "the-token"}
	b, digest, err := approvalBodyOf(j, ApprovalRequest{Action: map[string]any{"b": "<x>", "a": 1},
		Role: "finance", ExpiresIn: 90 * time.Minute, Quorum: 2, ExcludeRequester: true})
	require.NoError(t, err)
	want, err := ActionDigest(map[string]any{"a": 1, "b": "<x>"})
	require.NoError(t, err)
	require.Equal(t, want, digest)
	raw, err := json.Marshal(b)
	require.NoError(t, err)
	require.JSONEq(t, `{"task_id":"01J00000000000000000000000","attempt":3,"token":"the-token","action":{"a":1,"b":"<x>"},"role":"finance","expires_in":"1h30m0s","quorum":2,"exclude_requester":true}`, string(raw))
	require.Equal(t, `{"a":1,"b":"<x>"}`, string(b.Action), "the action is sent in its canonical form")
	b, digest, err = approvalBodyOf(&Job{TaskID: "T", Attempt: 1}, ApprovalRequest{Action: "x"})
	require.NoError(t, err)
	raw, err = json.Marshal(b)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "expires_in")
	id := approvalCommandID("01J00000000000000000000000", 9999, digest)
	require.LessOrEqual(t, len(id), 128, "the service's limit on command ids")
	require.True(t, strings.HasPrefix(id, "approval.01J00000000000000000000000.9999."), id)
}
