package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/handlers"
)

func adminCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "maintenance: verify the log, rebuild the views, NATS configuration for a cluster"}
	cmd.AddCommand(natsConfigCmd(g))
	var o maintenance
	var keep, accept bool
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
			return o.run(cmd.Context(), func(ctx context.Context, m *handlers.Maintenance) error {
				return rebuildViews(ctx, m, handlers.RebuildOptions{Keep: keep, AcceptVerifiedPrefix: accept, Progress: cmd.ErrOrStderr()}, cmd.OutOrStdout())
			})
		},
	}
	o.flags(rebuild)
	rebuild.Flags().BoolVar(&keep, "keep", true, "keep the old views as views.old")
	rebuild.Flags().BoolVar(&accept, "accept-verified-prefix", false, "if the log fails verification, accept its verified prefix: the commands after it are lost")
	verify := &cobra.Command{
		Use:   "verify --data DIR",
		Short: "verify the whole log: its chain, every record's MAC, its stream's configuration, and the views' checkpoint against it",
		Long: "verify reads every record of the log (stop `dwr serve` on DIR first, or use --nats) and checks that each decodes, is authenticated by the " +
			"log key, takes the next position and carries the previous record's hash; that the log stream is configured as dwr's log must be; and " +
			"that the views' last record is on the log's chain. It prints progress on stderr, then a table (or --json), and exits 6 naming what is wrong. " +
			"It never changes anything.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), func(ctx context.Context, m *handlers.Maintenance) error {
				return verifyLog(ctx, m, g.json, cmd.OutOrStdout(), cmd.ErrOrStderr())
			})
		},
	}
	o.flags(verify)
	cmd.AddCommand(rebuild, verify)
	return cmd
}

// maintenance is the flags of a command on the log of a stopped service's
// data directory (on an embedded NATS server) or of a cluster (--nats): its
// stream is never created or changed.
type maintenance handlers.MaintenanceConfig

func (o *maintenance) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.DataDir, "data", envOr("DWR_DATA", "dwr-data"), "the data directory of the server")
	natsFlags(cmd, &o.External)
	logKeyFlag(cmd, &o.LogKeyFile)
}

// run opens the log with the log key, runs f on it and closes it.
func (o *maintenance) run(ctx context.Context, f func(context.Context, *handlers.Maintenance) error) error {
	m, err := handlers.OpenMaintenance(ctx, handlers.MaintenanceConfig(*o))
	if err != nil {
		return handlersError(err)
	}
	defer m.Close()
	return f(ctx, m)
}

func rebuildViews(ctx context.Context, m *handlers.Maintenance, o handlers.RebuildOptions, out io.Writer) error {
	r, err := m.Rebuild(ctx, o)
	var refused *handlers.RebuildRefusedError
	var ce *eventstore.StreamConfigError
	switch {
	case errors.As(err, &refused):
		printLost(o.Progress, refused)
		return fail(exitDamaged, "%v\nthe views were left untouched; to give up what follows the verified prefix, run again with --accept-verified-prefix", err)
	case errors.As(err, &ce):
		return fail(exitDamaged, "%v", err)
	case err != nil:
		return fail(exitError, "%v", err)
	}
	if r.Acceptance != nil {
		printAcceptance(out, r.Acceptance)
	}
	fmt.Fprintf(out, "rebuilt views from %d log records in %s (%.0f records/s), every record verified\nsha256 %s\n%s\n",
		r.Records, r.Took.Round(time.Millisecond), float64(r.Records)/r.Took.Seconds(), hex.EncodeToString(r.Sum), r.Verdict)
	return nil
}

// printLost prints what a refused rebuild would lose: the commands of the
// records after the verified prefix, and those the views applied beyond it.
func printLost(w io.Writer, r *handlers.RebuildRefusedError) {
	var ie *eventstore.IntegrityError
	if !errors.As(r, &ie) {
		return
	}
	fmt.Fprintf(w, "the verified prefix ends at %s; accepting it would lose these acknowledged commands (%d", r.Prefix, len(r.Lost))
	if r.Unnamed > 0 {
		fmt.Fprintf(w, ", and those of %d records that do not decode", r.Unnamed)
	}
	fmt.Fprintln(w, "):")
	for _, c := range r.Lost {
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

func verifyLog(ctx context.Context, m *handlers.Maintenance, asJSON bool, out, errw io.Writer) error {
	r, err := m.Verify(ctx, errw)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	if asJSON {
		if err := printJSON(out, r); err != nil {
			return err
		}
	} else {
		printVerify(out, r)
	}
	if !r.OK {
		return fail(exitDamaged, "the log fails verification: %s", strings.Join(r.Problems, "; "))
	}
	return nil
}

func printVerify(out io.Writer, r *handlers.VerifyReport) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "log\t%s, subject %s, key id %s\n", r.Stream, r.Subject, r.KeyID)
	if r.Config.OK {
		fmt.Fprintf(w, "stream config\tok\n")
	}
	for _, d := range r.Config.Diffs {
		fmt.Fprintf(w, "stream config\tCHANGED: %s is %s, want %s\n", d.Field, d.Got, d.Want)
	}
	legacy := ""
	if r.Legacy > 0 {
		legacy = fmt.Sprintf(" (%d of the old unauthenticated format, before the chain)", r.Legacy)
	}
	fmt.Fprintf(w, "records\t%d read up to seq %d%s\n", r.Records, r.LastSeq, legacy)
	if r.Accepted > 0 {
		fmt.Fprintf(w, "accepted\t%d damaged stretch(es) closed by an acceptance record\n", r.Accepted)
	}
	if d := r.Damage; d != nil {
		fmt.Fprintf(w, "chain\tDAMAGED at seq %d (n %d): %s: %s\n", d.Seq, d.N, d.Problem, d.Detail)
		fmt.Fprintf(w, "verified prefix\t%s (sha256 %.16s…)\n", r.Verified, r.Verified.Hash)
		var cmds []string
		undecodable := 0
		for _, l := range d.Lost {
			if !l.Decoded {
				undecodable++
			}
			cmds = append(cmds, l.Commands...)
		}
		fmt.Fprintf(w, "after it\t%d records do not verify (%d undecodable); their commands: %s\n",
			len(d.Lost)+d.LostMore, undecodable, orNone(strings.Join(cmds, " ")))
	} else {
		fmt.Fprintf(w, "chain\tverified to the end: %s (sha256 %.16s…)\n", r.Verified, r.Verified.Hash)
	}
	switch v := r.Views; {
	case v == nil:
		fmt.Fprintf(w, "views\tnone checked\n")
	case v.OK:
		fmt.Fprintf(w, "views\tcheckpoint %s: on the log's verified chain\n", v.Tip)
	default:
		fmt.Fprintf(w, "views\t%s\n", v.Problem)
	}
	if r.OK {
		fmt.Fprintf(w, "result\tOK\n")
	} else {
		fmt.Fprintf(w, "result\tFAILED\n")
	}
	_ = w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none named"
	}
	return s
}
