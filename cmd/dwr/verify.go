package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/dwr-run/dwr/eventstore"
)

// verifyReport is what `dwr admin verify` found, printed as a table or JSON.
type verifyReport struct {
	OK       bool     `json:"ok"`
	Stream   string   `json:"stream"`
	Subject  string   `json:"subject"`
	KeyID    string   `json:"key_id"`
	Problems []string `json:"problems,omitempty"`

	Config struct {
		OK    bool                    `json:"ok"`
		Diffs []eventstore.ConfigDiff `json:"diffs,omitempty"`
	} `json:"config"`

	Records  int               `json:"records"`
	Legacy   int               `json:"legacy_records,omitempty"`
	Accepted int               `json:"accepted_stretches,omitempty"`
	LastSeq  uint64            `json:"last_seq"`
	Verified eventstore.LogTip `json:"verified"`
	Damage   *verifyDamage     `json:"damage,omitempty"`

	Views *verifyViews `json:"views,omitempty"`
}

type verifyDamage struct {
	Seq      uint64                  `json:"seq,omitempty"`
	N        uint64                  `json:"n,omitempty"`
	Problem  string                  `json:"problem"`
	Detail   string                  `json:"detail,omitempty"`
	Lost     []eventstore.LostRecord `json:"lost,omitempty"`
	LostMore int                     `json:"lost_more,omitempty"`
}

type verifyViews struct {
	Checkpoint uint64            `json:"checkpoint"`
	Tip        eventstore.LogTip `json:"tip"`
	OK         bool              `json:"ok"`
	Problem    string            `json:"problem,omitempty"`
}

func verifyLog(ctx context.Context, data string, n natsOpts, k logKeyOpts, asJSON bool, out, errw io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	al, err := openAdminLog(ctx, data, n, k)
	if err != nil {
		return err
	}
	defer al.close()
	r := &verifyReport{Stream: al.log.Stream(), Subject: al.log.Subject(), KeyID: al.key.ID()}
	r.Config.OK = al.configErr == nil
	var ce *eventstore.StreamConfigError
	if errors.As(al.configErr, &ce) {
		r.Config.Diffs = ce.Diffs
		r.Problems = append(r.Problems, ce.Error())
	}

	v, err := eventstore.VerifyLog(ctx, al.log, al.key, func(seq, last uint64) {
		fmt.Fprintf(errw, "\rverifying: record at seq %d of %d (%d%%)", seq, last, seq*100/max(last, 1))
	})
	fmt.Fprintln(errw)
	if err != nil {
		return fail(exitError, "read the log: %v", err)
	}
	r.Records, r.Legacy, r.Accepted, r.LastSeq, r.Verified = v.Records, v.Legacy, v.Accepted, v.Last, v.Tip
	if d := v.Damage; d != nil {
		r.Damage = &verifyDamage{Seq: d.Seq, N: d.N, Problem: string(d.Problem), Detail: d.Detail, Lost: d.Lost, LostMore: d.LostMore}
		r.Problems = append(r.Problems, d.Error())
	} else if err := eventstore.CheckStat(ctx, al.log, v.Tip); err != nil { // the log's own counts against what was read
		r.Problems = append(r.Problems, err.Error())
	}

	if n.url == "" {
		views, damage, err := openViews(filepath.Join(data, "views"))
		switch {
		case err != nil:
			return err
		case damage != nil:
			r.Views = &verifyViews{Problem: damage.Error() + " (the next dwr serve rebuilds them)"}
			r.Problems = append(r.Problems, "views: "+r.Views.Problem)
		case views != nil:
			r.Views = &verifyViews{Checkpoint: views.Checkpoint(), Tip: views.LogTip(), OK: true}
			if ahead, err := viewsAhead(ctx, al, views, v.Tip); err != nil {
				_ = views.Close()
				return fail(exitError, "check the views against the log: %v", err)
			} else if ahead && v.Damage == nil {
				r.Views.OK = false
				r.Views.Problem = fmt.Sprintf("the views hold records up to %s, which the log no longer holds as verified (it ends at %s): acknowledged records were lost", views.LogTip(), v.Tip)
				r.Problems = append(r.Problems, r.Views.Problem)
			} else if ahead {
				r.Views.OK = false
				r.Views.Problem = fmt.Sprintf("the views applied up to %s, beyond the verified prefix", views.LogTip())
			}
			_ = views.Close()
		}
	}
	r.OK = len(r.Problems) == 0

	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
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

func printVerify(out io.Writer, r *verifyReport) {
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
