package handlers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// workspaceOf reads the third token of a subject that has a fourth, as
// splitting it would, without allocating.
func TestWorkspaceOfASubject(t *testing.T) {
	split := func(subject string) string {
		if parts := strings.SplitN(subject, ".", 4); len(parts) == 4 {
			return parts[2]
		}
		return ""
	}
	for _, subject := range []string{"dwr.cmd.default.goal.create", "dwr.q.acme-labs.task.get", "dwr.q.ws.x", "dwr.q.ws",
		"dwr.q", "dwr", "", "a..b.c", "dwr.jsapi.CONSUMER.INFO.DWR_WORK.dwr-a-q", "..."} {
		require.Equal(t, split(subject), workspaceOf(subject), subject)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = workspaceOf("dwr.cmd.default.goal.create") }))
}
