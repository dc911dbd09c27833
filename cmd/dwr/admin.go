package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/projections"
)

func adminCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "maintenance: verify the log, rebuild the views, NATS configuration for a cluster"}
	cmd.AddCommand(natsConfigCmd(g))
	var data string
	var keep, accept bool
	var n natsOpts
	var k logKeyOpts
	rebuild := &cobra.Command{
		Use:   "rebuild --data DIR",
		Short: "rebuild the views from the log (stop `dwr serve` on DIR first)",
		Long: "rebuild verifies the whole log and replays it into fresh views, compares them with the current ones byte for byte, reports the result, " +
			"and puts the rebuilt views in place (the old ones are kept as views.old unless --keep=false). A log that fails verification, or " +
			"that ends before what the current views hold, is refused (exit 6) and the views are left untouched, unless --accept-verified-prefix: " +
			"then the acknowledged commands after the verified prefix are printed as lost and an acceptance record is appended to the log first. " +
			"The log's stream is never created or changed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return rebuildViews(cmd.Context(), data, n, k, keep, accept, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	rebuild.Flags().StringVar(&data, "data", envOr("DWR_DATA", "dwr-data"), "the data directory of the server")
	rebuild.Flags().BoolVar(&keep, "keep", true, "keep the old views as views.old")
	rebuild.Flags().BoolVar(&accept, "accept-verified-prefix", false, "if the log fails verification, accept its verified prefix: the commands after it are lost")
	n.flags(rebuild)
	k.flags(rebuild)
	verify := &cobra.Command{
		Use:   "verify --data DIR",
		Short: "verify the whole log: its chain, every record's MAC, its stream's configuration, and the views' checkpoint against it",
		Long: "verify reads every record of the log (stop `dwr serve` on DIR first, or use --nats) and checks that each decodes, is authenticated by the " +
			"log key, takes the next position and carries the previous record's hash; that the log stream is configured as dwr's log must be; and " +
			"that the views' last record is on the log's chain. It prints progress on stderr, then a table (or --json), and exits 6 naming what is wrong. " +
			"It never changes anything.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return verifyLog(cmd.Context(), data, n, k, g.json, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	verify.Flags().StringVar(&data, "data", envOr("DWR_DATA", "dwr-data"), "the data directory of the server")
	n.flags(verify)
	k.flags(verify)
	cmd.AddCommand(rebuild, verify)
	return cmd
}

// adminLog is the log of a stopped server's data directory (on an embedded
// NATS server) or of a cluster, opened for maintenance: its stream is never
// created or changed.
type adminLog struct {
	log       *eventstore.JetStreamLog
	configErr error // the stream's configuration differs from the declared one
	key       *eventstore.LogKey
	close     func()
}

func openAdminLog(ctx context.Context, data string, n natsOpts, k logKeyOpts) (*adminLog, error) {
	keyBytes, err := k.load(data, false, nil)
	if err != nil {
		return nil, err
	}
	key, err := eventstore.NewLogKey(keyBytes)
	if err != nil {
		return nil, fail(exitInvalid, "%v", err)
	}
	var nc *nats.Conn
	closers := []func(){}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if n.url == "" {
		if _, err := os.Stat(filepath.Join(data, "nats")); err != nil {
			return nil, fail(exitInvalid, "%s holds no dwr log (%v)", data, err)
		}
		srv, onc, err := access.OpenStopped(data, slog.New(slog.DiscardHandler))
		if err != nil {
			return nil, fail(exitError, "open the log in %s: %v (is `dwr serve` still running on it?)", data, err)
		}
		closers = append(closers, srv.Shutdown)
		nc = onc
	} else if nc, err = n.connect("dwr-admin"); err != nil {
		return nil, err
	}
	closers = append(closers, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		closeAll()
		return nil, err
	}
	// Read-only: a maintenance command never creates or changes the stream
	// (an update could lower its replicas, or hide a change made to it).
	l, configErr, err := eventstore.InspectJetStreamLog(ctx, js, eventstore.JetStreamConfig{})
	if err != nil {
		closeAll()
		return nil, fail(exitError, "open the log: %v", err)
	}
	return &adminLog{log: l, configErr: configErr, key: key, close: closeAll}, nil
}

// openViews opens the views in dir for reading, if there are any. Damaged
// views are reported, not opened (nil store, damage set).
func openViews(dir string) (s *projections.Store, damage error, err error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, nil
	}
	s, err = projections.Open(dir, projections.Options{})
	switch {
	case errors.Is(err, projections.ErrDamaged):
		return nil, err, nil
	case err != nil:
		return nil, nil, fail(exitError, "open the views: %v (is `dwr serve` still running on them?)", err)
	}
	return s, nil, nil
}

func rebuildViews(ctx context.Context, data string, n natsOpts, k logKeyOpts, keep, accept bool, out, errw io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	al, err := openAdminLog(ctx, data, n, k)
	if err != nil {
		return err
	}
	defer al.close()
	if al.configErr != nil {
		return fail(exitDamaged, "%v\nrestore the stream's configuration first (dwr never changes it); the views were left untouched", al.configErr)
	}
	live := filepath.Join(data, "views")
	old, oldDamage, err := openViews(live)
	if err != nil {
		return err
	}
	closeOld := func() {
		if old != nil {
			_ = old.Close()
			old = nil
		}
	}
	defer closeOld()
	if oldDamage != nil {
		fmt.Fprintf(errw, "the current views are damaged (%v): they are replaced\n", oldDamage)
	}

	fresh := filepath.Join(data, fmt.Sprintf("views.rebuild-%d", time.Now().Unix()))
	start := time.Now()
	s, err := rebuildFrom(ctx, al, fresh, errw)
	if err == nil && old != nil {
		var beyond bool
		if beyond, err = viewsAhead(ctx, al, old, s.LogTip()); err == nil && beyond {
			_ = s.Close()
			err = &eventstore.IntegrityError{Problem: eventstore.ProblemTruncated, Prefix: s.LogTip(),
				Detail: fmt.Sprintf("the current views had applied up to %s, the log now ends at %s", old.LogTip(), s.LogTip())}
		}
	}
	if errors.Is(err, eventstore.ErrIntegrity) {
		_ = os.RemoveAll(fresh)
		if !accept {
			printLost(errw, err, old)
			return fail(exitDamaged, "%v\nthe views were left untouched; to give up what follows the verified prefix, run again with --accept-verified-prefix", err)
		}
		a, aerr := handlers.AcceptVerifiedPrefix(ctx, al.log, al.key, old, "dwr-admin", time.Now(), slog.New(slog.DiscardHandler))
		if aerr != nil {
			return fail(exitError, "accept the verified prefix: %v", aerr)
		}
		printAcceptance(out, a)
		closeOld() // the views were moved aside: a rebuild of the log replaces them
		_ = os.RemoveAll(live)
		oldDamage = fmt.Errorf("they held what the accepted prefix lost; moved to %s", a.ViewsMovedTo)
		start = time.Now()
		s, err = rebuildFrom(ctx, al, fresh, errw)
	}
	if err != nil {
		_ = os.RemoveAll(fresh)
		return fail(exitError, "rebuild: %v", err)
	}
	took := time.Since(start)
	records := s.Checkpoint()
	newSum, err := dumpSum(s)
	_ = s.Close()
	if err != nil {
		return err
	}
	verdict := "no previous views"
	switch {
	case oldDamage != nil:
		verdict = fmt.Sprintf("the previous views are replaced (%v)", oldDamage)
	case old != nil:
		oldSum, err := dumpSum(old)
		oldCP := old.Checkpoint()
		closeOld()
		switch {
		case err != nil:
			verdict = fmt.Sprintf("the previous views could not be read (%v): the rebuilt ones replace them", err)
		case oldCP != records:
			verdict = fmt.Sprintf("the current views were at record %d, the log ends at %d: they were behind", oldCP, records)
		case bytes.Equal(oldSum, newSum):
			verdict = "identical to the current views, byte for byte"
		default:
			verdict = "DIFFERENT from the current views: the rebuilt ones, from the log, replace them"
		}
	}
	closeOld()
	if _, err := os.Stat(live); err == nil {
		if keep {
			_ = os.RemoveAll(live + ".old")
			if err := os.Rename(live, live+".old"); err != nil {
				return err
			}
		} else if err := os.RemoveAll(live); err != nil {
			return err
		}
	}
	if err := os.Rename(fresh, live); err != nil {
		return err
	}
	fmt.Fprintf(out, "rebuilt views from %d log records in %s (%.0f records/s), every record verified\nsha256 %s\n%s\n",
		records, took.Round(time.Millisecond), float64(records)/took.Seconds(), hex.EncodeToString(newSum), verdict)
	return nil
}

// rebuildFrom rebuilds views from the whole log in dir, verifying it.
func rebuildFrom(ctx context.Context, al *adminLog, dir string, errw io.Writer) (*projections.Store, error) {
	s, err := projections.Rebuild(ctx, al.log, al.key, dir, projections.Options{}, func(done, total uint64) {
		fmt.Fprintf(errw, "\rrebuilding: record %d of %d (%d%%)", done, total, done*100/max(total, 1))
	})
	fmt.Fprintln(errw)
	return s, err
}

// viewsAhead reports whether views hold records beyond the end of the log
// (tip): the log lost records they had applied.
func viewsAhead(ctx context.Context, al *adminLog, views *projections.Store, end eventstore.LogTip) (bool, error) {
	tip := views.LogTip()
	if tip.N == 0 {
		return false, nil
	}
	if tip.Seq > end.Seq {
		return true, nil
	}
	_, err := eventstore.ReadVerified(ctx, al.log, al.key, tip, func(uint64, *eventstore.Commit) error { return nil })
	switch {
	case err == nil, errors.Is(err, eventstore.ErrTipDiscarded):
		return false, nil
	case errors.Is(err, eventstore.ErrIntegrity):
		return true, nil
	default:
		return false, err
	}
}

// printLost prints what a refused rebuild would lose: the commands of the
// records after the verified prefix, and those the views applied beyond it.
func printLost(w io.Writer, err error, views *projections.Store) {
	var ie *eventstore.IntegrityError
	if !errors.As(err, &ie) {
		return
	}
	var cmds []string
	unnamed := 0
	for _, r := range ie.Lost {
		if !r.Decoded {
			unnamed++
		}
		cmds = append(cmds, r.Commands...)
	}
	if views != nil {
		if more, err := views.CommandsAfter(ie.Prefix.Seq); err == nil {
			cmds = append(cmds, more...)
		}
	}
	fmt.Fprintf(w, "the verified prefix ends at %s; accepting it would lose these acknowledged commands (%d", ie.Prefix, len(dedupe(cmds)))
	if unnamed > 0 {
		fmt.Fprintf(w, ", and those of %d records that do not decode", unnamed)
	}
	fmt.Fprintln(w, "):")
	for _, c := range dedupe(cmds) {
		fmt.Fprintln(w, "  "+c)
	}
}

// printAcceptance prints an acceptance that was made.
func printAcceptance(w io.Writer, a *handlers.Acceptance) {
	fmt.Fprintf(w, "accepted the log's verified prefix, up to %s: %s\n", a.Verification.Tip, a.Problem)
	fmt.Fprintf(w, "acceptance record appended at seq %d; the views were moved to %s\n", a.Seq, a.ViewsMovedTo)
	fmt.Fprintf(w, "acknowledged commands lost (%d", len(a.Lost))
	if a.Unnamed > 0 {
		fmt.Fprintf(w, ", and those of %d records that cannot be named", a.Unnamed)
	}
	fmt.Fprintln(w, "):")
	for _, c := range a.Lost {
		fmt.Fprintln(w, "  "+c)
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

func dumpSum(s *projections.Store) ([]byte, error) {
	h := sha256.New()
	if err := s.Dump(h); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
