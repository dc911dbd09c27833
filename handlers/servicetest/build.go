package servicetest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
