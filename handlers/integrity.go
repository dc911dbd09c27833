package handlers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dwr-run/dwr/eventstore"
)

// LogKeyFile is the name of the log key's file in a data directory.
const LogKeyFile = "log.key"

// LoadLogKey reads the log key from path. When the file does not exist and
// create is set, it makes a new random key and writes it there (mode 0600,
// never overwriting a file that appeared meanwhile) and reports created. It
// returns an error if the file cannot be read or written, or holds fewer
// than eventstore.LogKeySize bytes.
func LoadLogKey(path string, create bool) (key []byte, created bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create {
		if b, err = eventstore.GenerateLogKey(); err != nil {
			return nil, false, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, false, fmt.Errorf("handlers: log key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, false, fmt.Errorf("handlers: create the log key %s: %w", path, err)
		}
		_, werr := f.Write(b)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			_ = os.Remove(path)
			return nil, false, fmt.Errorf("handlers: write the log key %s: %w", path, err)
		}
		return b, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("handlers: read the log key: %w", err)
	}
	if len(b) < eventstore.LogKeySize {
		return nil, false, fmt.Errorf("handlers: the log key %s holds %d bytes, at least %d are needed", path, len(b), eventstore.LogKeySize)
	}
	return b, false, nil
}
