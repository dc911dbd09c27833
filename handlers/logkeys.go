package handlers

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dwr-run/dwr/eventstore"
)

// RetiredLogKeysSuffix names the file of the retired log keys: beside the
// log key's file, with this suffix (DATA/log.key.retired by default). It
// holds the keys a rotation retired, one per line in standard base64, the
// most recent first; lines starting with # are comments.
const RetiredLogKeysSuffix = ".retired"

// logKeyPath returns the file of the log key: file, or dataDir/LogKeyFile.
func logKeyPath(file, dataDir string) string {
	if file != "" {
		return file
	}
	return filepath.Join(dataDir, LogKeyFile)
}

// OpenRetiredLogKeys returns the retired log keys kept beside the log key's
// file (file, or dataDir/LogKeyFile), the most recent first: none when there
// is no such file. It returns an error naming the file and the line of a key
// that is not base64 of at least eventstore.LogKeySize bytes.
func OpenRetiredLogKeys(file, dataDir string) ([][]byte, error) {
	path := logKeyPath(file, dataDir) + RetiredLogKeysSuffix
	b, err := os.ReadFile(path) //nolint:gosec // the operator's key file
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("handlers: read the retired log keys: %w", err)
	}
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil || len(k) < eventstore.LogKeySize {
			return nil, fmt.Errorf("handlers: %s line %d: not a log key (standard base64 of at least %d bytes)", path, n, eventstore.LogKeySize)
		}
		keys = append(keys, k)
	}
	return keys, sc.Err()
}

// openLogKeyRing is openLogKey with the retired keys kept beside it.
func openLogKeyRing(file, dataDir string, create bool, logger *slog.Logger) (key []byte, retired [][]byte, err error) {
	if key, err = openLogKey(file, dataDir, create, logger); err != nil {
		return nil, nil, err
	}
	if retired, err = OpenRetiredLogKeys(file, dataDir); err != nil {
		return nil, nil, classed{ErrInvalidConfig, err}
	}
	return key, retired, nil
}

// RotateLogKey replaces the log key in file (or dataDir/LogKeyFile) with a
// new one and keeps the old one first among the retired keys beside it
// (RetiredLogKeysSuffix), and returns both keys' ids. The retired keys are
// written first, then the key (each to a new file, synced and renamed into
// place), so that a rotation cut short leaves either key in force with the
// old one retired too, and can be run again. A service started with the new
// key writes under it from its epoch record on; it and every reader of the
// log need the retired keys to verify the records before.
func RotateLogKey(file, dataDir string) (oldID, newID string, err error) {
	path := logKeyPath(file, dataDir)
	cur, _, err := LoadLogKey(path, false)
	if err != nil {
		return "", "", err
	}
	retired, err := OpenRetiredLogKeys(file, dataDir)
	if err != nil {
		return "", "", err
	}
	next, err := eventstore.GenerateLogKey()
	if err != nil {
		return "", "", err
	}
	// The old key first; a key listed already (a rotation cut short) once.
	var b strings.Builder
	b.WriteString("# dwr: log keys retired by rotations, the most recent first; keep them with the log key\n")
	var ids []string
	for _, k := range append([][]byte{cur}, retired...) {
		id, err := eventstore.NewLogKey(k)
		if err != nil {
			return "", "", err
		}
		if !slices.Contains(ids, id.ID()) {
			ids = append(ids, id.ID())
			fmt.Fprintf(&b, "# %s\n%s\n", id.ID(), base64.StdEncoding.EncodeToString(k))
		}
	}
	nk, err := eventstore.NewLogKey(next)
	if err != nil {
		return "", "", err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{path + RetiredLogKeysSuffix, []byte(b.String())}, {path, next}} {
		if err := ReplaceKeyFile(f.path, f.data); err != nil {
			return "", "", fmt.Errorf("handlers: write %s: %w", f.path, err)
		}
	}
	return ids[0], nk.ID(), nil
}
