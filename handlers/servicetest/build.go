package servicetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// GoBuild builds package pkg — a path in this module such as ./cmd/dwr, or
// a package of a module it requires, such as
// github.com/nats-io/nats-server/v2 — into the file out, with -race when
// race, from the root of the module the test runs in: for tests that run
// the binaries as child processes.
func GoBuild(out, pkg string, race bool) error {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(mod))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("go env GOMOD: not inside the dwr module")
	}
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...) //nolint:gosec // G204: a test builds a package it names
	cmd.Dir = filepath.Dir(gomod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Binary is a package built once per test run, on its first use, into a
// temp dir of its own, for the tests that run it as a child process. The
// zero Binary is ready to use; TestMain calls Remove once the tests ran.
type Binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds pkg (GoBuild, with -race when race) into a file called name
// on its first call and returns that file's path; it fails t when the build
// failed. Later calls return what the first one built, whatever their
// arguments.
func (b *Binary) Path(t testing.TB, name, pkg string, race bool) string {
	t.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "dwr-test-bin-"); b.err != nil {
			return
		}
		out := filepath.Join(b.dir, name)
		if b.err = GoBuild(out, pkg, race); b.err == nil {
			b.path = out
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes what Path built, if anything; call it after the tests
// ran.
func (b *Binary) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}
