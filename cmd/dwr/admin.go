package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
)

func adminCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "maintenance: rebuild the views"}
	var data string
	var keep bool
	var n natsOpts
	rebuild := &cobra.Command{
		Use:   "rebuild --data DIR",
		Short: "rebuild the views from the log (stop `dwr serve` on DIR first)",
		Long:  "rebuild replays the whole log into fresh views, compares them with the current ones byte for byte, reports the result, and puts the rebuilt views in place (the old ones are kept as views.old unless --keep=false).",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return rebuildViews(cmd.Context(), data, n, keep, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	rebuild.Flags().StringVar(&data, "data", envOr("DWR_DATA", "dwr-data"), "the data directory of the server")
	rebuild.Flags().BoolVar(&keep, "keep", true, "keep the old views as views.old")
	n.flags(rebuild)
	cmd.AddCommand(rebuild)
	return cmd
}

func rebuildViews(ctx context.Context, data string, n natsOpts, keep bool, out, errw io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var nc *nats.Conn
	var err error
	if n.url == "" {
		srv, err := embedded.Start(embedded.Config{DataDir: data})
		if err != nil {
			return fail(exitError, "open the log in %s: %v (is `dwr serve` still running on it?)", data, err)
		}
		defer srv.Shutdown()
		if nc, err = srv.Connect(); err != nil {
			return fail(exitError, "%v", err)
		}
	} else if nc, err = n.connect("dwr-admin"); err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// Read-only: a maintenance command never creates or changes the stream
	// (an update could lower its replicas, or hide a change made to it).
	log, err := eventstore.OpenJetStreamLog(ctx, js, eventstore.JetStreamConfig{})
	if err != nil {
		return fail(exitError, "open the log: %v", err)
	}
	live := filepath.Join(data, "views")
	fresh := filepath.Join(data, fmt.Sprintf("views.rebuild-%d", time.Now().Unix()))
	start := time.Now()
	s, err := projections.Rebuild(ctx, log, fresh, projections.Options{}, func(done, total uint64) {
		fmt.Fprintf(errw, "\rrebuilding: record %d of %d (%d%%)", done, total, done*100/max(total, 1))
	})
	fmt.Fprintln(errw)
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
	if _, err := os.Stat(live); err == nil {
		old, err := projections.Open(live, projections.Options{})
		if err != nil {
			return fail(exitError, "open the current views: %v (is `dwr serve` still running on %s?)", err, data)
		}
		oldSum, err := dumpSum(old)
		oldCP := old.Checkpoint()
		_ = old.Close()
		if err != nil {
			return err
		}
		switch {
		case oldCP != records:
			verdict = fmt.Sprintf("the current views were at record %d, the log ends at %d: they were behind", oldCP, records)
		case bytes.Equal(oldSum, newSum):
			verdict = "identical to the current views, byte for byte"
		default:
			verdict = "DIFFERENT from the current views: the rebuilt ones, from the log, replace them"
		}
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
	fmt.Fprintf(out, "rebuilt views from %d log records in %s (%.0f records/s)\nsha256 %s\n%s\n",
		records, took.Round(time.Millisecond), float64(records)/took.Seconds(), hex.EncodeToString(newSum), verdict)
	return nil
}

func dumpSum(s *projections.Store) ([]byte, error) {
	h := sha256.New()
	if err := s.Dump(h); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}
