package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/dwr-run/dwr/eventstore"
)

// VerifyReport is what Maintenance.Verify found: `dwr admin verify` prints
// it as a table or JSON. OK is set when Problems is empty.
type VerifyReport struct {
	OK      bool   `json:"ok"`
	Stream  string `json:"stream"`
	Subject string `json:"subject"`
	KeyID   string `json:"key_id"`
	// RetiredKeyIDs are the ids of the retired log keys verification also
	// accepts, where the log had not moved past them.
	RetiredKeyIDs []string `json:"retired_key_ids,omitempty"`
	Problems      []string `json:"problems,omitempty"`

	Config struct {
		OK    bool                    `json:"ok"`
		Diffs []eventstore.ConfigDiff `json:"diffs,omitempty"`
	} `json:"config"`

	Records  int               `json:"records"`
	Legacy   int               `json:"legacy_records,omitempty"`
	Accepted int               `json:"accepted_stretches,omitempty"`
	LastSeq  uint64            `json:"last_seq"`
	Verified eventstore.LogTip `json:"verified"`
	Damage   *VerifyDamage     `json:"damage,omitempty"`

	Views *VerifyViews `json:"views,omitempty"`
}

// VerifyDamage is where the log stops verifying, and the records after it.
type VerifyDamage struct {
	Seq      uint64                  `json:"seq,omitempty"`
	N        uint64                  `json:"n,omitempty"`
	Problem  string                  `json:"problem"`
	Detail   string                  `json:"detail,omitempty"`
	Lost     []eventstore.LostRecord `json:"lost,omitempty"`
	LostMore int                     `json:"lost_more,omitempty"`
}

// VerifyViews is how the views' checkpoint stands against the log.
type VerifyViews struct {
	Checkpoint uint64            `json:"checkpoint"`
	Tip        eventstore.LogTip `json:"tip"`
	OK         bool              `json:"ok"`
	Problem    string            `json:"problem,omitempty"`
}

// Verify reads every record of the log and checks that each decodes, is
// authenticated by the log key, takes the next position and carries the
// previous record's hash; that the log's stream is configured as dwr's log
// must be; and, for a data directory's own log, that the views' last record
// is on the log's chain. It changes nothing. Progress goes to progress (nil
// for none). What is wrong is in the report; it returns an error when the
// log or the views cannot be read.
func (m *Maintenance) Verify(ctx context.Context, progress io.Writer) (*VerifyReport, error) {
	errw := progress
	if errw == nil {
		errw = io.Discard
	}
	r := &VerifyReport{Stream: m.log.Stream(), Subject: m.log.Subject(), KeyID: m.key.ID(), RetiredKeyIDs: m.key.IDs()[1:]}
	r.Config.OK = m.configErr == nil
	var ce *eventstore.StreamConfigError
	if errors.As(m.configErr, &ce) {
		r.Config.Diffs = ce.Diffs
		r.Problems = append(r.Problems, ce.Error())
	}

	v, err := eventstore.VerifyLog(ctx, m.log, m.key, func(seq, last uint64) {
		fmt.Fprintf(errw, "\rverifying: record at seq %d of %d (%d%%)", seq, last, seq*100/max(last, 1))
	})
	fmt.Fprintln(errw)
	if err != nil {
		return nil, fmt.Errorf("read the log: %v", err)
	}
	r.Records, r.Legacy, r.Accepted, r.LastSeq, r.Verified = v.Records, v.Legacy, v.Accepted, v.Last, v.Tip
	if d := v.Damage; d != nil {
		r.Damage = &VerifyDamage{Seq: d.Seq, N: d.N, Problem: string(d.Problem), Detail: d.Detail, Lost: d.Lost, LostMore: d.LostMore}
		r.Problems = append(r.Problems, d.Error())
	} else if err := eventstore.CheckStat(ctx, m.log, v.Tip); err != nil { // the log's own counts against what was read
		r.Problems = append(r.Problems, err.Error())
	}

	if m.embedded {
		views, damage, err := openViews(filepath.Join(m.dir, "views"))
		switch {
		case err != nil:
			return nil, err
		case damage != nil:
			r.Views = &VerifyViews{Problem: damage.Error() + " (the next dwr serve rebuilds them)"}
			r.Problems = append(r.Problems, "views: "+r.Views.Problem)
		case views != nil:
			r.Views = &VerifyViews{Checkpoint: views.Checkpoint(), Tip: views.LogTip(), OK: true}
			if ahead, err := m.viewsAhead(ctx, views, v.Tip); err != nil {
				_ = views.Close()
				return nil, fmt.Errorf("check the views against the log: %v", err)
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
	return r, nil
}
