package handlers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
)

// LogKeyFile is the name of the log key's file in a data directory.
const LogKeyFile = "log.key"

// LoadLogKey reads the log key from path. When the file does not exist and
// create is set, it makes a new random key and writes it there (mode 0600,
// never overwriting a file that appeared meanwhile) and reports created. It
// returns an error if the file cannot be read or written, or holds fewer
// than eventstore.LogKeySize bytes.
func LoadLogKey(path string, create bool) (key []byte, created bool, err error) {
	return loadKey(path, create, "log key", eventstore.LogKeySize, eventstore.GenerateLogKey)
}

// loadKey reads the secret what from path, at least size bytes, making it
// with generate (mode 0600, never overwriting a file that appeared
// meanwhile) when the file does not exist and create is set.
func loadKey(path string, create bool, what string, size int, generate func() ([]byte, error)) (key []byte, created bool, err error) {
	b, err := os.ReadFile(path) //nolint:gosec // the operator's key file
	if errors.Is(err, os.ErrNotExist) && create {
		if b, err = generate(); err != nil {
			return nil, false, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, false, fmt.Errorf("handlers: %s: %w", what, err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) //nolint:gosec // the operator's key file
		if err != nil {
			return nil, false, fmt.Errorf("handlers: create the %s %s: %w", what, path, err)
		}
		_, werr := f.Write(b)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			_ = os.Remove(path)
			return nil, false, fmt.Errorf("handlers: write the %s %s: %w", what, path, err)
		}
		return b, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("handlers: read the %s: %w", what, err)
	}
	if len(b) < size {
		return nil, false, fmt.Errorf("handlers: the %s %s holds %d bytes, at least %d are needed", what, path, len(b), size)
	}
	return b, false, nil
}

// MasterKeyFile is the name of the master key's file in a data directory.
const MasterKeyFile = "master.key"

// OpenMasterKey returns the master key that wraps the data keys: from env
// (standard base64 of eventstore.MasterKeyBytes bytes) when it is set, else
// from file, which must exist, or when file is "" from
// dataDir/MasterKeyFile, made there when it is missing (and logged, to be
// given to every replica and backed up: without it no payload can be read).
func OpenMasterKey(env, file, dataDir string, logger *slog.Logger) ([]byte, error) {
	if env != "" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(env))
		if err != nil || len(key) != eventstore.MasterKeyBytes {
			return nil, classed{ErrInvalidConfig, fmt.Errorf("DWR_MASTER_KEY is not the standard base64 of %d bytes", eventstore.MasterKeyBytes)}
		}
		return key, nil
	}
	path, explicit := file, file != ""
	if !explicit {
		path = filepath.Join(dataDir, MasterKeyFile)
	}
	key, created, err := loadKey(path, !explicit, "master key", eventstore.MasterKeyBytes, newMasterKey)
	if err != nil {
		return nil, classed{ErrInvalidConfig, fmt.Errorf("%v (the master key: --master-key-file, DWR_MASTER_KEY_FILE or DWR_MASTER_KEY, default DATA/%s)", err, MasterKeyFile)}
	}
	if created && logger != nil {
		logger.Info("made a new master key: give this file to every replica (--master-key-file), and back it up apart from the data: without it no payload can be read", "file", path)
	}
	return key[:eventstore.MasterKeyBytes], nil
}

// OpenLogKey returns the log key of a data directory: the one in file, which
// must exist, or when file is "" the one in dataDir/LogKeyFile, made there
// when create is set and it is missing (and logged, to be given to every
// replica). It logs a warning when the key's file is readable by others
// than its owner. It returns LoadLogKey's errors.
func OpenLogKey(file, dataDir string, create bool, logger *slog.Logger) ([]byte, error) {
	path := logKeyPath(file, dataDir)
	key, created, err := LoadLogKey(path, create && file == "")
	if err != nil {
		return nil, err
	}
	if created && logger != nil {
		logger.Info("made a new log key: give this file to every replica of this log (--log-key-file), and back it up", "file", path)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 && logger != nil {
		logger.Warn("the log key file is readable by others than its owner: whoever reads it can forge log records", "file", path, "mode", st.Mode().Perm().String())
	}
	return key, nil
}

// openLogKey is OpenLogKey for Serve and OpenMaintenance: its error wraps
// ErrInvalidConfig and says where the key is looked for.
func openLogKey(file, dataDir string, create bool, logger *slog.Logger) ([]byte, error) {
	key, err := OpenLogKey(file, dataDir, create, logger)
	if err != nil {
		return nil, classed{ErrInvalidConfig, fmt.Errorf("%v (the log key: --log-key-file or DWR_LOG_KEY_FILE, default DATA/%s)", err, LogKeyFile)}
	}
	return key, nil
}

// Acceptance is what AcceptVerifiedPrefix found and did.
type Acceptance struct {
	// Verification is the whole log's verification.
	Verification *eventstore.Verification
	// Views is the views' last record before the acceptance.
	Views eventstore.LogTip
	// Problem says what was wrong: the damage found in the log, or the log
	// ending before the views.
	Problem string
	// Lost names the acknowledged commands that are lost, as
	// "<workspace>/<command id>": those of the records after the verified
	// prefix that decode, and those the views had applied beyond it.
	Lost []string
	// Unnamed counts the lost records whose commands cannot be named.
	Unnamed int
	// Seq and Record are the acceptance appended (0 and nil when the log
	// verified and nothing was lost).
	Seq    uint64
	Record *eventstore.Commit
	// ViewsMovedTo is where the views went (they are rebuilt from the log).
	ViewsMovedTo string
}

// AcceptVerifiedPrefix is what an operator does when the log fails
// verification and the damage cannot be repaired from elsewhere (a replica,
// a backup): it gives up what follows the verified prefix, with a record of
// what was given up, instead of refusing to start forever.
//
// It verifies the whole log, and compares the views' last record with it.
// When the log verifies to its end and the views are not beyond it, it does
// nothing and returns an Acceptance with Seq 0. Otherwise it names the
// commands lost — those in the records after the verified prefix, as far as
// they decode, and those the views had applied from records the log no
// longer holds — logging each, moves the views aside (they are rebuilt from
// the log), and appends a KindAccept record chained on the last verified
// record. The damaged records cannot be deleted (the stream denies deletes
// and purges): they stay in the log, outside its chain, and every reader
// verifies through the acceptance. The writer then appends after it.
//
// It returns an error if the log cannot be read or appended to (for
// example eventstore.ErrConflict when something was appended meanwhile).
func AcceptVerifiedPrefix(ctx context.Context, l eventstore.Log, key *eventstore.LogKey, views *projections.Store,
	writer string, now time.Time, logger *slog.Logger,
) (*Acceptance, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	v, err := eventstore.VerifyLog(ctx, l, key, func(seq, last uint64) {
		logger.Info("handlers: verifying the whole log", "seq", seq, "last", last)
	})
	if err != nil {
		return nil, err
	}
	a := &Acceptance{Verification: v}
	if views != nil {
		a.Views = views.LogTip()
	}
	lost := map[string]bool{}
	if d := v.Damage; d != nil {
		a.Problem = d.Error()
		for _, r := range d.Lost {
			if !r.Decoded {
				a.Unnamed++
			}
			for _, c := range r.Commands {
				lost[c] = true
			}
		}
		if d.Problem == eventstore.ProblemGap && d.N > d.Prefix.N+1 {
			a.Unnamed += int(min(d.N-d.Prefix.N-1, math.MaxInt32)) // missing records
		}
	}
	beyond, err := viewsBeyond(ctx, l, key, a.Views, v.Tip)
	if err != nil {
		return nil, err
	}
	if beyond {
		if a.Problem == "" {
			a.Problem = fmt.Sprintf("the log ends at %s, but the views had applied up to %s", v.Tip, a.Views)
		}
		cmds, err := views.CommandsAfter(v.Tip.Seq)
		if err != nil {
			return nil, fmt.Errorf("handlers: the commands the views hold beyond the log: %w", err)
		}
		for _, c := range cmds {
			lost[c] = true
		}
	}
	if v.Damage == nil && !beyond {
		logger.Info("handlers: the log verifies: there is no damage to accept", "records", v.Records, "last", v.Tip)
		return a, nil
	}
	// A command of a discarded record that the prefix holds too (a copied
	// or replayed record) is not lost.
	if err := keptInPrefix(ctx, l, key, v.Tip, lost); err != nil {
		return nil, err
	}
	for c := range lost {
		a.Lost = append(a.Lost, c)
	}
	slices.Sort(a.Lost)
	logger.Warn("handlers: accepting the log's verified prefix: what follows it is lost", "problem", a.Problem,
		"prefix", v.Tip.String(), "lost_commands", len(a.Lost), "unnamed_records", a.Unnamed)
	for _, c := range a.Lost {
		logger.Warn("handlers: acknowledged command lost", "command", c)
	}
	if views != nil {
		if a.ViewsMovedTo, err = views.Reset(fmt.Errorf("%w: they are rebuilt from the accepted prefix", projections.ErrDamaged)); err != nil {
			return nil, err
		}
	}
	acc := eventstore.Acceptance{Problem: a.Problem, Lost: a.Lost, Unnamed: a.Unnamed, By: "dwr --accept-verified-prefix", UpToSeq: v.Last}
	if d := v.Damage; d != nil {
		acc.Discarded = uint64(len(d.Lost)) + uint64(max(d.LostMore, 0))
		if len(d.Lost) > 0 {
			acc.FromSeq = d.Lost[0].Seq
		}
	}
	if beyond {
		acc.LostToN, acc.UpToSeq = a.Views.N, max(acc.UpToSeq, a.Views.Seq)
	}
	// Appended after whatever the log says its last record is (after damage
	// JetStream can miss the last one it holds: its answer is what an append
	// is checked against).
	last, err := l.LastSeq(ctx)
	if err != nil {
		return nil, err
	}
	a.Seq, a.Record, err = eventstore.AppendAcceptance(ctx, l, key, v.Tip, last, acc, writer, now)
	if err != nil {
		return nil, err
	}
	logger.Warn("handlers: the verified prefix is accepted: the log goes on after it", "acceptance_seq", a.Seq, "prefix", v.Tip.String())
	return a, nil
}

// keptInPrefix removes from lost the commands whose results the records of
// the verified prefix (up to tip) hold.
func keptInPrefix(ctx context.Context, l eventstore.Log, key *eventstore.LogKey, tip eventstore.LogTip, lost map[string]bool) error {
	if len(lost) == 0 || tip.N == 0 {
		return nil
	}
	errDone := errors.New("done")
	_, err := eventstore.ReadVerified(ctx, l, key, eventstore.LogTip{}, func(seq uint64, c *eventstore.Commit) error {
		if seq > tip.Seq {
			return errDone
		}
		for _, r := range c.Results {
			delete(lost, eventstore.CommandName(r.Workspace, r.Actor, r.CommandID))
		}
		if seq == tip.Seq {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) || errors.Is(err, eventstore.ErrIntegrity) {
		return nil // read up to the prefix's end (what follows is the damage)
	}
	return err
}

// viewsBeyond reports whether views that applied up to tip hold records that
// the log, verified up to end, no longer has: the log ends before tip, or
// tip is not on its verified chain (and not in a stretch an acceptance left
// out).
func viewsBeyond(ctx context.Context, l eventstore.Log, key *eventstore.LogKey, tip, end eventstore.LogTip) (bool, error) {
	if tip.N == 0 {
		return false, nil
	}
	if tip.Seq > end.Seq {
		return true, nil
	}
	_, err := eventstore.ReadVerified(ctx, l, key, tip, func(uint64, *eventstore.Commit) error { return nil })
	var ie *eventstore.IntegrityError
	switch {
	case err == nil, errors.Is(err, eventstore.ErrTipDiscarded):
		return false, nil
	case errors.As(err, &ie) && (ie.Problem == eventstore.ProblemTruncated || ie.Problem == eventstore.ProblemCheckpointMissing ||
		ie.Problem == eventstore.ProblemCheckpointChanged):
		return true, nil
	case errors.As(err, &ie):
		return false, nil // damage after the views' record: the verification has it
	default:
		return false, err
	}
}

func newMasterKey() ([]byte, error) {
	b := make([]byte, eventstore.MasterKeyBytes)
	_, err := rand.Read(b)
	return b, err
}

// LoadOrMakeMasterKey returns the master key in the file at path, making
// it there (mode 0600) when the file does not exist.
func LoadOrMakeMasterKey(path string) ([]byte, error) {
	key, _, err := loadKey(path, true, "master key", eventstore.MasterKeyBytes, newMasterKey)
	if err != nil {
		return nil, classed{ErrInvalidConfig, err}
	}
	return key[:eventstore.MasterKeyBytes], nil
}

// ReplaceKeyFile replaces the key file at path by one holding key (mode
// 0600), whole or not at all: written beside it, synced, then renamed over
// it, and its directory synced.
func ReplaceKeyFile(path string, key []byte) error {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) //nolint:gosec // the operator's key file
	if err != nil {
		return err
	}
	_, werr := f.Write(key)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
