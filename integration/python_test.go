package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// pythonSDKDir is the Python SDK's package root (executors/python), from
// the integration tests' working directory.
var pythonSDKDir = func() string {
	dir, err := filepath.Abs(filepath.Join("..", "executors", "python"))
	if err != nil {
		panic(err)
	}
	return dir
}()

// pythonSDK returns the Python interpreter that runs the Python SDK: the
// python3 on PATH, resolved to its executable once (a version manager's shim
// costs seconds at every start). Without python3, or without the
// cryptography package the SDK depends on, the test fails naming what to
// install when CI is set, and is skipped otherwise.
func pythonSDK(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := "the Python SDK needs " + what
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		missing("python3 (3.10 or later) on PATH")
	}
	pythonOnce.Do(func() {
		out, err := exec.Command(py, "-c", "import sys, cryptography; assert sys.version_info >= (3, 10); print(sys.executable)").CombinedOutput()
		if err != nil {
			pythonErr = strings.TrimSpace(string(out))
			return
		}
		pythonExe = strings.TrimSpace(string(out))
	})
	if pythonExe == "" {
		missing("Python 3.10 or later with the cryptography package (pip install cryptography, or apt-get install python3-cryptography): " +
			pythonErr)
	}
	return pythonExe
}

var (
	pythonOnce           sync.Once
	pythonExe, pythonErr string
)

// TestPythonSDKUnit runs the Python SDK's unit tests (python3 -m unittest
// in executors/python): its NATS protocol layer, nkeys, credentials and
// canonical JSON.
func TestPythonSDKUnit(t *testing.T) {
	py := pythonSDK(t)
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests")
	cmd.Dir = pythonSDKDir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonSDKDir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m unittest: %s", out)
	t.Logf("%s", out)
}
