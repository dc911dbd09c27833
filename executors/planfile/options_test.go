package planfile_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/executors/planfile"
	"github.com/dwr-run/dwr/schemas"
)

// Options resolve into the spec the wire carries: JSON input, a retry
// policy, a timeout, a verifier, relative moments counted from now, and an
// approval gate that any approval setting implies.
func TestOptionsResolveIntoASpec(t *testing.T) {
	o := planfile.Options{Spec: schemas.TaskSpec{Queue: "q", Approval: &schemas.ApprovalSpec{Role: "ops"}},
		Input: `{"n": 1}`, MaxAttempts: 4, Timeout: "5m", VerifyQueue: "checks", VerifyOnFail: "reject",
		StartAfter: "4s", Deadline: "2026-01-03T00:00:00Z", ApprovalExpiresIn: "1h"}
	spec, err := o.TaskSpec(now)
	require.NoError(t, err)
	deadline := time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)
	start := now.Add(4 * time.Second)
	require.Equal(t, schemas.TaskSpec{Queue: "q", Input: json.RawMessage(`{"n": 1}`), Retry: &schemas.RetryPolicy{MaxAttempts: 4},
		Timeout: schemas.Duration(5 * time.Minute), Verification: &schemas.VerificationSpec{Queue: "checks", OnFail: "reject"},
		StartAt: &start, Deadline: &deadline,
		Approval: &schemas.ApprovalSpec{Role: "ops", ExpiresIn: schemas.Duration(time.Hour)}}, spec)
	require.Equal(t, schemas.Duration(0), o.Spec.Approval.ExpiresIn, "the options are left as they were")

	spec, err = planfile.Options{Spec: schemas.TaskSpec{Queue: "q", Approval: &schemas.ApprovalSpec{}}}.TaskSpec(now)
	require.NoError(t, err)
	require.Nil(t, spec.Approval, "no gate unless asked for")
	spec, err = planfile.Options{Spec: schemas.TaskSpec{Queue: "q"}, Approval: true}.TaskSpec(now)
	require.NoError(t, err)
	require.Equal(t, &schemas.ApprovalSpec{}, spec.Approval)
}

// What cannot be used is an *OptionError that names its options, which a
// caller writes in its own words.
func TestOptionErrorsNameTheOptions(t *testing.T) {
	flag := func(o string) string { return "--" + o }
	for _, c := range []struct {
		o    planfile.Options
		opts []string
		msg  string
	}{
		{planfile.Options{Input: "{"}, []string{planfile.OptInput}, "--input is not valid JSON"},
		{planfile.Options{Timeout: "soon"}, []string{planfile.OptTimeout}, `--timeout "soon": time: invalid duration "soon"`},
		{planfile.Options{VerifyOnFail: "reject"}, []string{planfile.OptVerifyOnFail, planfile.OptVerifyOnInconclusive, planfile.OptVerifyQueue},
			"--verification.on_fail and --verification.on_inconclusive need --verification.queue"},
		{planfile.Options{StartAt: "2026-01-03T00:00:00Z", StartAfter: "1h"}, []string{planfile.OptStartAt, planfile.OptStartAfter},
			"give --start_at or --start_after, not both"},
		{planfile.Options{DeadlineAfter: "-1h"}, []string{planfile.OptDeadline, planfile.OptDeadlineAfter},
			`--deadline_after "-1h" is not a positive duration such as 30m or 48h`},
		{planfile.Options{StartAfter: "-1h"}, nil, ""}, // a start in the past is now
		{planfile.Options{Deadline: "tomorrow"}, []string{planfile.OptDeadline, planfile.OptDeadlineAfter},
			`--deadline "tomorrow" is not an RFC 3339 time (2026-01-02T15:04:05Z)`},
		{planfile.Options{ApprovalExpiresIn: "0s"}, []string{planfile.OptApprovalExpiresIn},
			`--approval.expires_in "0s" is not a positive duration such as 1h`},
	} {
		_, err := c.o.TaskSpec(now)
		if c.opts == nil {
			require.NoError(t, err)
			continue
		}
		var oe *planfile.OptionError
		require.True(t, errors.As(err, &oe), "%v", err)
		require.Equal(t, c.opts, oe.Options)
		require.Contains(t, oe.Message(flag), c.msg)
		require.Contains(t, err.Error(), "planfile: ")
	}
}
