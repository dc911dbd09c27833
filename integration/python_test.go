package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwr-run/dwr/handlers/servicetest/pki"
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

// TestPythonClient runs the Python SDK's client against a real dwr serve
// (executors/python/tests/live_client.py): a goal with its plan and a
// revision, a task read, signalled, cancelled, refusals with their codes and
// fields, a command id's retry, a subject the role may not use, and an
// artifact put and read back.
func TestPythonClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve")
	}
	py := pythonSDK(t)
	e := newExecEnv(t)
	out := runPythonScript(t, py, "live_client.py", "DWR_SERVER="+e.url, "DWR_CREDS="+pythonUser(t, e, "py-caller", "client"))
	require.Contains(t, out, "live client: ok")
}

// TestPythonWorker runs a dwr.Worker and a dwr.Client in one Python process
// against a real dwr serve (executors/python/tests/live_worker.py): a
// goal's dependent task handed its dependency's result, a delegation parked
// and resumed with the child goal's results, a per-attempt timeout that
// cancels the handler with cause "timeout", and a drain that lets a running
// job report before run returns.
func TestPythonWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve")
	}
	py := pythonSDK(t)
	e := newExecEnv(t)
	out := runPythonScript(t, py, "live_worker.py", "DWR_SERVER="+e.url,
		"DWR_CREDS="+pythonUser(t, e, "py-caller", "client"), "DWR_EXECUTOR_CREDS="+e.executorCreds("py", "pyw"))
	require.Contains(t, out, "live worker: ok")
}

// pythonUser adds a member of role (once the service takes commands) and
// returns its credential.
func pythonUser(t *testing.T, e *execEnv, name, role string) string {
	t.Helper()
	creds := filepath.Join(t.TempDir(), name+".creds")
	e.cli("users", "add", name, "--role", role, "--out", creds)
	return creds
}

// runPythonScript runs executors/python/tests/<script> with env, and
// returns its output; a failure fails the test with it.
func runPythonScript(t *testing.T, py, script string, env ...string) string {
	t.Helper()
	cmd := exec.Command(py, filepath.Join("tests", script))
	cmd.Dir = pythonSDKDir
	cmd.Env = append(append(os.Environ(), "PYTHONPATH="+pythonSDKDir, "PYTHONDONTWRITEBYTECODE=1"), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", script, out)
	t.Logf("%s", out)
	return string(out)
}

// TestPythonWorkerSurvivesServerRestart kills dwr serve -9 under a Python
// worker and starts it again: the worker's connection is made again, and it
// runs the next task.
func TestPythonWorkerSurvivesServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve and python3")
	}
	const queue = "py-restart"
	py := pythonSDK(t)
	e := newExecEnv(t)
	dir := t.TempDir()
	startProc(t, e, "pyexec "+queue, py, []string{"-m", "dwr.conformance"}, []string{"CONFORMANCE_QUEUE=" + queue,
		"CONFORMANCE_LEASE_MS=1500", "CONFORMANCE_DIR=" + dir, "CONFORMANCE_OBSERVE=" + filepath.Join(dir, "observations.jsonl"),
		"DWR_SERVER=" + e.url,
		"DWR_CREDS=" + e.executorCreds("py", queue), "PYTHONPATH=" + pythonSDKDir, "PYTHONUNBUFFERED=1"})
	survivesRestart(t, e, queue)
}

// TestPythonClientOverTLS runs the Python client against dwr serve started
// with a certificate and a CA for clients' (--tls-cert, --tls-key,
// --tls-ca): it connects over mutual TLS, trusting the CA given in
// DWR_TLS_CA, with the client certificate of DWR_TLS_CERT and DWR_TLS_KEY.
func TestPythonClientOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dwr serve")
	}
	py := pythonSDK(t)
	dir := t.TempDir()
	files := pki.New(t, dir)
	data, port := filepath.Join(dir, "data"), freePort(t)
	p := startServer(t, dwrBinary(t), logOnFailure(t, "dwr serve"), "dwr serve", "serve", "--data", data,
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--http", "", "--tls-cert", files.Cert, "--tls-key", files.Key,
		"--tls-ca", files.CA)
	select {
	case <-p.ready.seen:
	case <-p.done:
		t.Fatalf("dwr serve exited: %v", p.err)
	case <-time.After(30 * time.Second):
		t.Fatal("dwr serve not ready after 30s")
	}
	out := runPythonScript(t, py, "live_tls.py", fmt.Sprintf("DWR_SERVER=nats://127.0.0.1:%d", port),
		"DWR_CREDS="+filepath.Join(data, "admin.creds"), "DWR_TLS_CA="+files.CA, "DWR_TLS_CERT="+files.ClientCert,
		"DWR_TLS_KEY="+files.ClientKey)
	require.Contains(t, out, "live tls: ok")
}
