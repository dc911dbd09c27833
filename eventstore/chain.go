package eventstore

import (
	"cmp"
	"fmt"
	"sync"
)

// ChainProblem names what is wrong in a hash chain.
type ChainProblem string

// The problems a ChainError can report.
const (
	// ChainGap: the event's version skips one or more versions.
	ChainGap ChainProblem = "version gap"
	// ChainDuplicate: the event's version is not above the last one seen.
	ChainDuplicate ChainProblem = "duplicate version"
	// ChainPrevMismatch: the event's PrevHash is not the hash of the previous
	// event of its aggregate.
	ChainPrevMismatch ChainProblem = "previous hash mismatch"
	// ChainNotRecorded: the event read for a version is not the one
	// recorded for it (its hash, or the aggregate and version it names,
	// differ from what the history holds).
	ChainNotRecorded ChainProblem = "not the event recorded"
)

// ChainError reports an event that does not extend its aggregate's chain.
type ChainError struct {
	// AggregateType and AggregateID name the aggregate whose chain broke.
	AggregateType string
	AggregateID   string
	// Version is the event's version; WantVersion the one that would extend
	// the chain.
	Version, WantVersion uint64
	// GotPrev is the event's PrevHash; WantPrev the hash of the aggregate's
	// last event ("" before version 1).
	GotPrev, WantPrev string
	// Problem says what is wrong.
	Problem ChainProblem
}

// Error describes the problem with the aggregate and versions involved.
func (e *ChainError) Error() string {
	switch e.Problem {
	case ChainPrevMismatch:
		return fmt.Sprintf("eventstore: %s/%s v%d: %s: prev %q, want %q",
			e.AggregateType, e.AggregateID, e.Version, e.Problem, e.GotPrev, e.WantPrev)
	case ChainNotRecorded:
		return fmt.Sprintf("eventstore: %s/%s v%d: %s", e.AggregateType, e.AggregateID, e.Version, e.Problem)
	default:
		return fmt.Sprintf("eventstore: %s/%s v%d: %s: want v%d",
			e.AggregateType, e.AggregateID, e.Version, e.Problem, e.WantVersion)
	}
}

type aggKey struct{ typ, id string }

type chainTip struct {
	version uint64
	hash    string
}

// ChainVerifier holds, per aggregate (type and id), the version and hash of
// the last event seen. Readers use Check to verify every event they read
// extends its aggregate's chain; the committer uses Begin and ChainTx.Link to
// number and chain the events it writes. It keeps one entry per aggregate ever
// seen, about a hundred bytes each.
//
// A ChainVerifier is safe for concurrent use; a ChainTx is not.
type ChainVerifier struct {
	mu   sync.Mutex
	tips map[aggKey]chainTip
	src  TipSource
	max  int
}

// TipSource gives the tip of an aggregate that a ChainVerifier has not seen:
// its last version and that event's hash (0 and "" when it has none). A view
// that applies every record the verifier checks or commits, before the next
// one, is a TipSource.
type TipSource interface {
	Tip(aggType, aggID string) (version uint64, hash string, err error)
}

// NewChainVerifier returns an empty verifier: every aggregate starts before
// version 1.
func NewChainVerifier() *ChainVerifier {
	return &ChainVerifier{tips: make(map[aggKey]chainTip)}
}

// NewChainVerifierOver returns a verifier that asks src for the tips it has
// not seen, and forgets what it has seen once it tracks more than max
// aggregates (src must by then reflect them): a writer starts at once and
// its memory stays bounded, however many aggregates the log holds.
func NewChainVerifierOver(src TipSource, max int) *ChainVerifier {
	return &ChainVerifier{tips: make(map[aggKey]chainTip), src: src, max: max}
}

// tip returns k's tip from memory or the source. The caller holds v.mu.
func (v *ChainVerifier) tip(k aggKey) (chainTip, error) {
	if t, ok := v.tips[k]; ok || v.src == nil {
		return t, nil
	}
	ver, h, err := v.src.Tip(k.typ, k.id)
	if err != nil {
		return chainTip{}, fmt.Errorf("eventstore: tip of %s/%s: %w", k.typ, k.id, err)
	}
	return chainTip{ver, h}, nil
}

// trim forgets every tip when there are too many; the source has them. The
// caller holds v.mu.
func (v *ChainVerifier) trim() {
	if v.src != nil && v.max > 0 && len(v.tips) > v.max {
		clear(v.tips)
	}
}

// Seed sets an aggregate's tip, to resume from a checkpoint: version is the
// aggregate's last version and hash the hex SHA-256 of that event's stored
// bytes. A version of 0 forgets the aggregate.
func (v *ChainVerifier) Seed(aggType, aggID string, version uint64, hash string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := aggKey{aggType, aggID}
	if version == 0 {
		delete(v.tips, k)
		return
	}
	v.tips[k] = chainTip{version, hash}
}

// Tip returns an aggregate's last version and that event's hash, or (0, "")
// for an aggregate never seen (or whose tip the source could not give).
func (v *ChainVerifier) Tip(aggType, aggID string) (version uint64, hash string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	t, _ := v.tip(aggKey{aggType, aggID})
	return t.version, t.hash
}

// Len returns the number of aggregates the verifier tracks.
func (v *ChainVerifier) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.tips)
}

// Check verifies that e, a stored event with Raw set, is the next event of its
// aggregate: its version is the last one plus one and its PrevHash the last
// event's hash. On success the tip advances to e. It returns a *ChainError
// (the tip unchanged) when the chain is broken, and an error if e has no Raw.
func (v *ChainVerifier) Check(e *Event) error {
	if len(e.Raw) == 0 {
		return fmt.Errorf("eventstore: check %s/%s v%d: event has no stored bytes", e.AggregateType, e.AggregateID, e.Version)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	k := aggKey{e.AggregateType, e.AggregateID}
	t, err := v.tip(k)
	if err != nil {
		return err
	}
	if err := CheckNext(e, t.version, t.hash); err != nil {
		return err
	}
	v.tips[k] = chainTip{e.Version, e.Hash()}
	return nil
}

// CheckNext verifies that e is the next event of an aggregate whose last
// event has version last and hash lastHash (0 and "" before its first event):
// e's version is last plus one and its PrevHash is lastHash. It returns nil,
// or a *ChainError saying what is wrong. It is the check that Check and
// ChainTx.Link make against the tips they track; a reader that keeps the tips
// elsewhere (the views keep theirs in Pebble) calls it directly.
func CheckNext(e *Event, last uint64, lastHash string) error {
	ce := &ChainError{
		AggregateType: e.AggregateType, AggregateID: e.AggregateID,
		Version: e.Version, WantVersion: last + 1,
		GotPrev: e.PrevHash, WantPrev: lastHash,
	}
	switch {
	case e.Version <= last:
		ce.Problem = ChainDuplicate
	case e.Version > last+1:
		ce.Problem = ChainGap
	case e.PrevHash != lastHash:
		ce.Problem = ChainPrevMismatch
	default:
		return nil
	}
	return ce
}

// Begin starts a speculative extension of the chain, for a batch being
// written. Nothing changes in v until ChainTx.Commit.
func (v *ChainVerifier) Begin() *ChainTx {
	v.mu.Lock()
	v.trim()
	v.mu.Unlock()
	return &ChainTx{v: v, tips: make(map[aggKey]chainTip)}
}

// ChainTx numbers and chains the events of one batch on top of a
// ChainVerifier's tips, without changing them until Commit. Drop it to
// discard the batch.
type ChainTx struct {
	v    *ChainVerifier
	tips map[aggKey]chainTip
}

// Link makes e the next event of its aggregate within the batch: it sets
// e.Version to the last version plus one if it is 0, sets e.PrevHash, then
// encodes e (setting e.Raw) so the next event can chain on its hash. ID and
// Time must therefore be final. It returns a *ChainError if e carries a
// version or PrevHash that does not extend the chain, or an encoding error.
func (tx *ChainTx) Link(e *Event) error {
	k := aggKey{e.AggregateType, e.AggregateID}
	tip, ok := tx.tips[k]
	if !ok && e.Version != 1 { // an aggregate's first event chains on nothing: no lookup
		var err error
		tx.v.mu.Lock()
		tip, err = tx.v.tip(k)
		tx.v.mu.Unlock()
		if err != nil {
			return err
		}
	}
	e.Version = cmp.Or(e.Version, tip.version+1)
	if e.PrevHash == "" {
		e.PrevHash = tip.hash
	}
	if err := CheckNext(e, tip.version, tip.hash); err != nil {
		return err
	}
	if err := encodeEvent(e); err != nil {
		return err
	}
	tx.tips[k] = chainTip{e.Version, e.Hash()}
	return nil
}

// Commit applies the batch's tips to the verifier. Call it once the batch's
// record is durably in the log.
func (tx *ChainTx) Commit() {
	tx.v.mu.Lock()
	defer tx.v.mu.Unlock()
	for k, t := range tx.tips {
		tx.v.tips[k] = t
	}
	clear(tx.tips)
}
