package handlers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
)

// taskRefOf reads an executor's command as decoding its body would: it
// knows every executor command, so that authorizing one never decodes the
// body a second time, and for each it names what the body names.
func TestTaskRefOfKnowsEveryExecutorCommand(t *testing.T) {
	for name := range domain.ExecutorCommands {
		body, err := os.ReadFile(filepath.Join("..", "schemas", "testdata", "commands", name+".json"))
		require.NoError(t, err, name)
		cmd, ok := domain.NewCommand(name)
		require.True(t, ok, name)
		require.NoError(t, json.Unmarshal(body, cmd), name)
		got, known := taskRefOf(cmd)
		require.True(t, known, "taskRefOf does not know %s", name)
		var want taskRef
		require.NoError(t, json.Unmarshal(body, &want), name)
		require.Equal(t, want, got, name)
		require.NotEqual(t, taskRef{}, got, "%s names no task and no queue", name)
	}
}
