package handlers

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dwr-run/dwr/eventstore"
)

// The maintenance reports print themselves, as `dwr admin verify` and
// `dwr admin rebuild` show them to people (with --json, they are encoded).

// Print writes the report as a table of what was checked and how it
// stands, ending with the result (OK or FAILED).
func (r *VerifyReport) Print(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "log\t%s, subject %s, key id %s\n", r.Stream, r.Subject, r.KeyID)
	if len(r.RetiredKeyIDs) > 0 {
		fmt.Fprintf(w, "retired keys\t%s\n", strings.Join(r.RetiredKeyIDs, ", "))
	}
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
	return w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "none named"
	}
	return s
}

// Print writes what the rebuild did: the acceptance it made first, if any,
// then how many records it replayed, how fast, the views' digest and the
// comparison with the views before.
func (r *Rebuilt) Print(w io.Writer) error {
	if r.Acceptance != nil {
		if err := r.Acceptance.Print(w); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "rebuilt views from %d log records in %s (%.0f records/s), every record verified\nsha256 %s\n%s\n",
		r.Records, r.Took.Round(time.Millisecond), float64(r.Records)/r.Took.Seconds(), hex.EncodeToString(r.Sum), r.Verdict)
	return err
}

// Print writes an acceptance that was made: where the verified prefix
// ends, the record appended, and the acknowledged commands lost.
func (a *Acceptance) Print(w io.Writer) error {
	fmt.Fprintf(w, "accepted the log's verified prefix, up to %s: %s\n", a.Verification.Tip, a.Problem)
	fmt.Fprintf(w, "acceptance record appended at seq %d; the views were moved to %s\n", a.Seq, a.ViewsMovedTo)
	fmt.Fprintf(w, "acknowledged commands lost (%d", len(a.Lost))
	if a.Unnamed > 0 {
		fmt.Fprintf(w, ", and those of %d records that cannot be named", a.Unnamed)
	}
	return printLines(w, a.Lost)
}

// PrintLost writes what accepting the verified prefix would lose, for a
// log that fails verification: the commands of the records after the
// prefix, and those the views applied beyond it. It writes nothing for a
// log that only ends before the views.
func (e *RebuildRefusedError) PrintLost(w io.Writer) error {
	var ie *eventstore.IntegrityError
	if !errors.As(e, &ie) {
		return nil
	}
	fmt.Fprintf(w, "the verified prefix ends at %s; accepting it would lose these acknowledged commands (%d", e.Prefix, len(e.Lost))
	if e.Unnamed > 0 {
		fmt.Fprintf(w, ", and those of %d records that do not decode", e.Unnamed)
	}
	return printLines(w, e.Lost)
}

// printLines ends a list's heading with "):" and writes its lines,
// indented.
func printLines(w io.Writer, lines []string) error {
	fmt.Fprintln(w, "):")
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, "  "+l); err != nil {
			return err
		}
	}
	return nil
}
