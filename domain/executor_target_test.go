package domain

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// ExecutorTarget reads an executor's command as decoding its body would: it
// knows every executor command (so that both the service's early check and
// the writer's judge each one by its queue), and for each it names what the
// body names.
func TestExecutorTargetKnowsEveryExecutorCommand(t *testing.T) {
	for name := range ExecutorCommands {
		body, err := os.ReadFile(filepath.Join("..", "schemas", "testdata", "commands", name+".json"))
		require.NoError(t, err, name)
		cmd, ok := NewCommand(name)
		require.True(t, ok, name)
		require.NoError(t, json.Unmarshal(body, cmd), name)
		taskID, queue, known := ExecutorTarget(cmd)
		require.True(t, known, "ExecutorTarget does not know %s", name)
		var want struct {
			TaskID string `json:"task_id"`
			Queue  string `json:"queue"`
		}
		require.NoError(t, json.Unmarshal(body, &want), name)
		require.Equal(t, want.TaskID, taskID, name)
		require.Equal(t, want.Queue, queue, name)
		require.NotEqual(t, "", taskID+queue, "%s names no task and no queue", name)
	}
}
