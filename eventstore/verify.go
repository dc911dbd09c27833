package eventstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrTipDiscarded reports a verifier resumed from a tip that an accepted
// prefix left out: the log verifies, but whatever was derived up to that tip
// (views) holds records that are no longer part of it and must be rebuilt.
var ErrTipDiscarded = errors.New("eventstore: the checkpoint lies in a stretch of the log that an accepted prefix discarded")

// LogTip is the last verified record of a partition: where a verifier, a
// committer or a view resumes. The zero value is the empty partition.
type LogTip struct {
	// N is the record's position (0: no record yet).
	N uint64 `json:"n"`
	// Seq is its stream sequence.
	Seq uint64 `json:"seq"`
	// Hash is the hex SHA-256 of its stored bytes.
	Hash string `json:"hash"`
	// First is the stream sequence of the partition's first record (N 1).
	First uint64 `json:"first,omitempty"`
	// Epoch is the highest epoch up to the record.
	Epoch uint64 `json:"epoch,omitempty"`
	// Format is the record's format: a FormatLegacy record may follow only
	// another one.
	Format int `json:"f,omitempty"`
	// Discarded counts the records that acceptances left out up to here:
	// the partition holds N+Discarded records.
	Discarded uint64 `json:"discarded,omitempty"`
	// KeyID is the id of the log key the record was written under ("" for
	// FormatLegacy, and in tips kept before it was recorded): the records
	// after it are under that key, or a newer one from an epoch record on.
	KeyID string `json:"kid,omitempty"`
}

// Next returns the tip once c, verified at seq, follows t.
func (t LogTip) Next(seq uint64, c *Commit) LogTip {
	n := LogTip{N: c.N, Seq: seq, Hash: c.Hash, First: t.First, Epoch: max(t.Epoch, c.Epoch), Format: c.Format, Discarded: t.Discarded,
		KeyID: c.KeyID}
	if c.N == 1 {
		n.First = seq
	}
	if c.Accept != nil {
		n.Discarded += c.Accept.Discarded
		if t.N == 0 && c.Accept.FromSeq > 0 {
			n.First = c.Accept.FromSeq // the discarded records come first
		}
	}
	return n
}

// String describes the tip for messages.
func (t LogTip) String() string {
	if t.N == 0 {
		return "the empty log"
	}
	return fmt.Sprintf("seq %d (n %d)", t.Seq, t.N)
}

// Problem names what is wrong with a log.
type Problem string

// The problems an IntegrityError reports.
const (
	// ProblemUndecodable: the record's bytes are not a record.
	ProblemUndecodable Problem = "undecodable record"
	// ProblemMAC: the record's HMAC does not match its bytes: it was changed,
	// or it was not written by a holder of the log key.
	ProblemMAC Problem = "hmac mismatch"
	// ProblemOtherKey: the record is authenticated under another key than
	// this service's.
	ProblemOtherKey Problem = "written under another log key"
	// ProblemRetiredKey: the record is written under a log key that the
	// records before it had already moved past (a rotation): whoever holds
	// a retired key cannot append to the log.
	ProblemRetiredKey Problem = "written under a retired log key"
	// ProblemUnauthenticated: a record of the old, unauthenticated format
	// after authenticated ones: foreign.
	ProblemUnauthenticated Problem = "unauthenticated record"
	// ProblemGap: records are missing before this one.
	ProblemGap Problem = "gap"
	// ProblemRepeated: the record's position is not above the previous one
	// (a copy of an earlier record).
	ProblemRepeated Problem = "repeated position"
	// ProblemPrev: the record does not carry the previous record's hash
	// (that record changed, or this one is foreign).
	ProblemPrev Problem = "previous hash mismatch"
	// ProblemTruncated: the log ends before a record already seen.
	ProblemTruncated Problem = "truncated"
	// ProblemCheckpointMissing: the record a checkpoint names is gone.
	ProblemCheckpointMissing Problem = "checkpoint record missing"
	// ProblemCheckpointChanged: the record a checkpoint names has other
	// bytes.
	ProblemCheckpointChanged Problem = "checkpoint record changed"
	// ProblemMissing: the partition holds fewer records than were verified,
	// or its first record is gone.
	ProblemMissing Problem = "records missing"
	// ProblemStreamConfig: the stream's configuration lets it lose records
	// or differs from the declared one.
	ProblemStreamConfig Problem = "stream configuration"
)

// LostRecord is a record after a verified prefix: read but not verified, or
// known only by its position.
type LostRecord struct {
	// Seq is its stream sequence (0 when it is missing from the log).
	Seq uint64 `json:"seq,omitempty"`
	// N is its position as far as known (0 when unknown).
	N uint64 `json:"n,omitempty"`
	// Commands names its commands ("<workspace>/<command id>") when it
	// decoded.
	Commands []string `json:"commands,omitempty"`
	// Decoded is false for a record whose bytes are not a record.
	Decoded bool `json:"decoded"`
	// Kind is its kind, when it decoded.
	Kind string `json:"kind,omitempty"`
}

// maxLostRecords bounds the records an IntegrityError lists.
const maxLostRecords = 10_000

// IntegrityError reports where and how a log fails verification. It wraps
// ErrIntegrity.
type IntegrityError struct {
	// Seq is the stream sequence where the problem shows (0 when it is not
	// one record's).
	Seq uint64
	// N is the position of that record, as far as known.
	N uint64
	// Problem says what is wrong; Detail explains.
	Problem Problem
	Detail  string
	// Prefix is the last verified record before the problem.
	Prefix LogTip
	// Lost lists the records read after the prefix (at most 10,000; LostMore
	// counts the rest). They are not part of a verified history.
	Lost     []LostRecord
	LostMore int
}

// Error names the sequence, the problem and the verified prefix.
func (e *IntegrityError) Error() string {
	var b strings.Builder
	b.WriteString("eventstore: log damaged")
	if e.Seq > 0 {
		fmt.Fprintf(&b, " at seq %d", e.Seq)
		if e.N > 0 {
			fmt.Fprintf(&b, " (n %d)", e.N)
		}
	}
	fmt.Fprintf(&b, ": %s", e.Problem)
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Problem != ProblemStreamConfig {
		fmt.Fprintf(&b, "; the verified prefix ends at %s", e.Prefix)
		if n := len(e.Lost) + e.LostMore; n > 0 {
			fmt.Fprintf(&b, ", %d records after it do not verify", n)
		}
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrIntegrity) hold.
func (e *IntegrityError) Unwrap() error { return ErrIntegrity }

func (e *IntegrityError) lose(r LostRecord) {
	if len(e.Lost) < maxLostRecords {
		e.Lost = append(e.Lost, r)
	} else {
		e.LostMore++
	}
}

// LogVerifier checks, record after record, that a partition's records form
// an unbroken, authenticated chain from a verified tip: each record decodes,
// carries a valid HMAC under the log key, takes the next position and
// carries the previous record's hash.
//
// When a record fails, the verifier keeps reading without accepting
// anything, looking for a KindAccept record that an operator appended to
// accept the verified prefix (it chains on the last verified record and
// names it); from there the chain continues. Records in between are
// returned as neither verified nor failed, and Err reports the first
// problem if no acceptance closed it by the end.
//
// A LogVerifier is not safe for concurrent use.
type LogVerifier struct {
	key    *LogKey
	tip    LogTip
	damage *IntegrityError
	// accepted counts the damaged stretches closed by an acceptance.
	accepted int
}

// NewLogVerifier returns a verifier resuming after tip (the zero LogTip for
// a whole partition) and checking MACs under key.
func NewLogVerifier(key *LogKey, tip LogTip) *LogVerifier {
	return &LogVerifier{key: key, tip: tip}
}

// Tip returns the last verified record.
func (v *LogVerifier) Tip() LogTip { return v.tip }

// Accepted returns how many damaged stretches acceptances closed.
func (v *LogVerifier) Accepted() int { return v.accepted }

// Err returns the pending problem as an *IntegrityError, or nil.
func (v *LogVerifier) Err() error {
	if v.damage == nil {
		return nil
	}
	return v.damage
}

// CheckTip checks that rec, read at seq, is the record the tip names: the
// same sequence and the same hash, and (for a record of FormatChained)
// authentic under the verifier's key — a resumed reader or writer finds a
// wrong key before anything. It returns an *IntegrityError if not.
func (v *LogVerifier) CheckTip(seq uint64, rec []byte) error {
	switch {
	case seq != v.tip.Seq:
		return &IntegrityError{Seq: v.tip.Seq, N: v.tip.N, Problem: ProblemCheckpointMissing, Prefix: v.tip,
			Detail: fmt.Sprintf("the log has no record at seq %d (the next one is at seq %d)", v.tip.Seq, seq)}
	case hashBytes(rec) != v.tip.Hash:
		return &IntegrityError{Seq: seq, N: v.tip.N, Problem: ProblemCheckpointChanged, Prefix: v.tip,
			Detail: fmt.Sprintf("the record at seq %d is not the one verified there (sha256 %.16s…, was %.16s…)", seq, hashBytes(rec), v.tip.Hash)}
	case v.tip.Format == FormatChained:
		// The record is the one verified, so a key that does not
		// authenticate it is not the one it was verified with: nothing must
		// be written under this key.
		kid := "?"
		if c, err := DecodeCommit(rec); err == nil {
			kid = c.KeyID
		}
		switch r := v.key.rank(kid); {
		case r < 0 || !v.key.authenticUnder(kid, rec):
			return &IntegrityError{Seq: seq, N: v.tip.N, Problem: ProblemOtherKey, Prefix: v.tip,
				Detail: fmt.Sprintf("the log's records are authenticated under key id %s, %s (every replica must hold the same log key, and the keys it retired)", kid, v.keys())}
		case v.tip.KeyID == "":
			v.tip.KeyID = kid // a tip kept before it was recorded
		}
	}
	return nil
}

// keys describes the verifier's keys for messages.
func (v *LogVerifier) keys() string {
	ids := v.key.IDs()
	if len(ids) == 1 {
		return "this service's log key is " + ids[0]
	}
	return fmt.Sprintf("this service's log key is %s, and it retired %s", ids[0], strings.Join(ids[1:], ", "))
}

// keyProblem returns what is wrong with the key c (decoded from rec) is
// written under, as the record after the tip, or "": the key must be one of
// the verifier's, authenticate rec, and be the tip's key — or, in an epoch
// record (a writer taking over with a rotated key), a newer one than the
// tip's.
func (v *LogVerifier) keyProblem(c *Commit, rec []byte) (Problem, string) {
	r := v.key.rank(c.KeyID)
	switch {
	case r < 0:
		return ProblemOtherKey, fmt.Sprintf("its key id is %s, %s (every replica must hold the same log key, and the keys it retired)", c.KeyID, v.keys())
	case !v.key.authenticUnder(c.KeyID, rec):
		return ProblemMAC, "the record was changed, or was not written by a holder of the log key"
	case v.tip.KeyID == "" || c.KeyID == v.tip.KeyID:
		return "", ""
	}
	tipRank := v.key.rank(v.tip.KeyID)
	switch {
	case tipRank >= 0 && r > tipRank:
		return ProblemRetiredKey, fmt.Sprintf("its key id %s was retired: the records before it are under the newer key %s", c.KeyID, v.tip.KeyID)
	case c.Kind != KindEpoch:
		return ProblemRetiredKey, fmt.Sprintf("its key id is %s, the record before it is under %s: the log moves to another key only at a writer's epoch record", c.KeyID, v.tip.KeyID)
	}
	return "", ""
}

// Check verifies rec, read at seq (above every sequence checked before), as
// the next record. It returns the decoded record when it verifies (with N
// set, also for a record of FormatLegacy) and the tip moves to it. It
// returns nil and no error for a record that does not verify, or follows
// one that did not: see Err. It returns an error wrapping ErrTipDiscarded
// when an acceptance shows that the tip itself was discarded, and an error
// for a sequence not above the tip.
func (v *LogVerifier) Check(seq uint64, rec []byte) (*Commit, error) {
	if seq <= v.tip.Seq {
		return nil, fmt.Errorf("eventstore: verify seq %d: not after the verified tip %s", seq, v.tip)
	}
	c, derr := DecodeCommit(rec)
	if derr == nil && v.discards(c, rec) {
		return nil, fmt.Errorf("%w: the record at seq %d accepts the prefix up to seq %d and discards what followed up to seq %d, %s included",
			ErrTipDiscarded, seq, c.Accept.AfterSeq, c.Accept.UpToSeq, v.tip)
	}
	if v.damage != nil {
		if derr == nil && v.closes(c, rec) {
			v.damage, v.accepted = nil, v.accepted+1
			v.tip = v.tip.Next(seq, c)
			return c, nil
		}
		v.damage.lose(lostRecord(seq, c))
		return nil, nil
	}
	problem, detail := v.problem(c, rec, derr)
	if problem == "" {
		if c.Format == FormatLegacy {
			c.N = v.tip.N + 1
		}
		v.tip = v.tip.Next(seq, c)
		return c, nil
	}
	n := uint64(0)
	if c != nil {
		n = c.N
	}
	v.damage = &IntegrityError{Seq: seq, N: n, Problem: problem, Detail: detail, Prefix: v.tip}
	v.damage.lose(lostRecord(seq, c))
	return nil, nil
}

// problem returns what is wrong with c (decoded from rec at seq, or not:
// derr) as the next record, or "".
func (v *LogVerifier) problem(c *Commit, rec []byte, derr error) (Problem, string) {
	next := v.tip.N + 1
	switch {
	case derr != nil:
		return ProblemUndecodable, fmt.Sprintf("%d bytes: %v", len(rec), derr)
	case c.Format == FormatLegacy && v.tip.N > 0 && v.tip.Format != FormatLegacy:
		return ProblemUnauthenticated, fmt.Sprintf("a record of the old format %d (no MAC) after authenticated records: it was not written by this service", FormatLegacy)
	case c.Format == FormatLegacy:
		return "", ""
	}
	if p, detail := v.keyProblem(c, rec); p != "" {
		return p, detail
	}
	switch {
	case c.N > next:
		return ProblemGap, fmt.Sprintf("records n %d..%d are missing before it", next, c.N-1)
	case c.N < next:
		return ProblemRepeated, fmt.Sprintf("it takes position %d, which %s already holds", c.N, v.tip)
	case c.Prev != v.tip.Hash:
		return ProblemPrev, fmt.Sprintf("it chains on %.16s…, the record at %s has sha256 %.16s…", c.Prev, v.tip, v.tip.Hash)
	}
	return "", ""
}

// closes reports whether c, decoded from rec, is an authentic acceptance of
// exactly the verified prefix.
func (v *LogVerifier) closes(c *Commit, rec []byte) bool {
	return c.Kind == KindAccept && c.Format == FormatChained && c.Accept.AfterSeq == v.tip.Seq &&
		c.N == v.tip.N+1 && c.Prev == v.tip.Hash && v.acceptable(c, rec)
}

// discards reports whether c, decoded from rec, is an authentic acceptance
// that left the verifier's tip out: the tip follows the accepted prefix and
// was in the log when the acceptance was made.
func (v *LogVerifier) discards(c *Commit, rec []byte) bool {
	return c.Kind == KindAccept && c.Format == FormatChained && c.Accept.AfterSeq < v.tip.Seq && v.tip.Seq <= c.Accept.UpToSeq &&
		v.acceptable(c, rec)
}

// acceptable reports whether an acceptance c, decoded from rec, is written
// under a key the verifier holds that authenticates it, not one retired
// before the tip's.
func (v *LogVerifier) acceptable(c *Commit, rec []byte) bool {
	r := v.key.rank(c.KeyID)
	tipRank := v.key.rank(v.tip.KeyID)
	return r >= 0 && (tipRank < 0 || r <= tipRank) && v.key.authenticUnder(c.KeyID, rec)
}

func lostRecord(seq uint64, c *Commit) LostRecord {
	if c == nil {
		return LostRecord{Seq: seq}
	}
	return LostRecord{Seq: seq, N: c.N, Commands: c.Commands(), Decoded: true, Kind: c.Kind}
}

// ReadVerified reads the records of l after tip and passes each verified one
// to fn, in order, with its sequence; it returns the new tip. It first checks
// that the log still holds the record tip names, with the same bytes (a
// zero tip starts at the beginning). Records that do not verify are not
// passed to fn; nor are those after them, unless an acceptance closes them
// (see LogVerifier).
//
// It returns an *IntegrityError (wrapping ErrIntegrity) when the log ends
// before the tip, no longer holds the tip's record or holds it changed, or
// has records after it that do not verify; an error wrapping
// ErrTipDiscarded; fn's first error unchanged; or an error reading the log.
func ReadVerified(ctx context.Context, l Log, key *LogKey, tip LogTip, fn func(seq uint64, c *Commit) error) (LogTip, error) {
	v := NewLogVerifier(key, tip)
	last, err := l.LastSeq(ctx)
	if err != nil {
		return tip, err
	}
	if last < tip.Seq {
		return tip, &IntegrityError{Problem: ProblemTruncated, Prefix: tip,
			Detail: fmt.Sprintf("the log ends at seq %d, but its record at %s was verified before: the records after seq %d were lost", last, tip, last)}
	}
	from, checkTip := uint64(1), tip.Seq > 0
	if checkTip {
		from = tip.Seq
	}
	err = l.Read(ctx, from, func(seq uint64, rec []byte) error {
		if checkTip {
			checkTip = false
			if err := v.CheckTip(seq, rec); err != nil {
				return err
			}
			if seq == tip.Seq {
				return nil
			}
		}
		c, err := v.Check(seq, rec)
		if err != nil || c == nil {
			return err
		}
		return fn(seq, c)
	})
	if err != nil {
		return v.Tip(), err
	}
	if checkTip { // nothing read: the record at tip.Seq is gone
		return tip, &IntegrityError{Seq: tip.Seq, N: tip.N, Problem: ProblemCheckpointMissing, Prefix: tip,
			Detail: fmt.Sprintf("the log has no record at seq %d", tip.Seq)}
	}
	return v.Tip(), v.Err()
}

// CheckStat checks what a log's own counts say against a tip verified up to
// its end: that the partition's first record is still the one the tip
// started from, and, when the log ends at the tip, that it holds no fewer
// records than were verified. It is cheap (three requests) but only as good
// as the log's own accounting: JetStream can keep counting a message it lost
// in a damaged block. CheckChain reads instead. It returns an
// *IntegrityError, or an error reading the log's state.
func CheckStat(ctx context.Context, l Log, tip LogTip) error {
	if tip.N == 0 {
		return nil
	}
	st, err := l.Stat(ctx)
	if err != nil {
		return err
	}
	switch {
	case tip.First > 0 && st.First != tip.First:
		return &IntegrityError{Problem: ProblemMissing, Prefix: tip,
			Detail: fmt.Sprintf("the partition's first record is at seq %d, it was at seq %d: the records before were lost", st.First, tip.First)}
	case st.Last == tip.Seq && st.Records < tip.N+tip.Discarded:
		return &IntegrityError{Problem: ProblemMissing, Prefix: tip,
			Detail: fmt.Sprintf("the partition holds %d records up to seq %d, %d were verified there: %d records below it were lost (run dwr admin verify to find them)",
				st.Records, st.Last, tip.N+tip.Discarded, tip.N+tip.Discarded-st.Records)}
	}
	return nil
}

// CheckChain reads the partition from its first record up to tip (a tip
// verified before, e.g. the views' checkpoint) and checks that it still is
// the chain that was verified: every record in its place, each carrying the
// hash of the one before, up to the tip's record with the tip's hash. Since
// the tip's hash was verified, the hashes anchor every record below it: no
// MAC is needed, and records are not decoded beyond their position and
// previous hash. Stretches that acceptances discarded (first and last
// sequence) are skipped. It finds a record lost or changed below a
// checkpoint, which reading on from the checkpoint cannot see. It returns an
// *IntegrityError, or an error reading the log.
func CheckChain(ctx context.Context, l Log, tip LogTip, discarded [][2]uint64) error {
	if tip.N == 0 {
		return nil
	}
	var prev LogTip // the last record checked
	found := false
	errStop := errors.New("stop")
	err := l.Read(ctx, 1, func(seq uint64, rec []byte) error {
		if seq > tip.Seq {
			return errStop
		}
		for _, d := range discarded {
			if seq >= d[0] && seq <= d[1] {
				return nil
			}
		}
		h, herr := decodeHeader(rec)
		damage := func(p Problem, detail string) error {
			return &IntegrityError{Seq: seq, N: h.N, Problem: p, Detail: detail + " (below the checkpoint, " + tip.String() + ")", Prefix: prev}
		}
		if herr != nil {
			return damage(ProblemUndecodable, herr.Error())
		}
		switch h.F {
		case FormatLegacy:
			if prev.Format == FormatChained {
				return damage(ProblemUnauthenticated, "a record of the old format after chained ones")
			}
			h.N = prev.N + 1
		case FormatChained:
			switch {
			case h.N > prev.N+1:
				return damage(ProblemGap, fmt.Sprintf("records n %d..%d are missing before it", prev.N+1, h.N-1))
			case h.N < prev.N+1:
				return damage(ProblemRepeated, fmt.Sprintf("it takes position %d, which %s already holds", h.N, prev))
			case h.Prev != prev.Hash:
				return damage(ProblemPrev, "the record before it is not the one it was chained on")
			}
		default:
			return damage(ProblemUndecodable, fmt.Sprintf("record format %d", h.F))
		}
		prev = LogTip{N: h.N, Seq: seq, Hash: hashBytes(rec), Format: h.F}
		if seq == tip.Seq {
			found = true
			if prev.Hash != tip.Hash || prev.N != tip.N {
				return damage(ProblemCheckpointChanged, fmt.Sprintf("the record at seq %d is not the one verified there", seq))
			}
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	if !found {
		return &IntegrityError{Seq: tip.Seq, N: tip.N, Problem: ProblemCheckpointMissing, Prefix: prev,
			Detail: fmt.Sprintf("the log has no record at seq %d", tip.Seq)}
	}
	return nil
}

// recordHeader is what CheckChain reads of a record.
type recordHeader struct {
	F    int
	N    uint64
	Prev string
}

// decodeHeader reads a record's format, position and previous hash from
// the fields that come before its events, without scanning the rest: the
// record's hash, checked against the next record's, covers all of it.
func decodeHeader(rec []byte) (recordHeader, error) {
	if h, ok := fastHeader(rec); ok {
		return h, nil
	}
	return slowHeader(rec)
}

// fastHeader reads the header as EncodeCommit lays it out: `{"f":2,` first,
// then scalars (a quote inside a string is escaped, so `,"n":` cannot occur
// before the field itself), `,"n":<digits>` and, unless it is the first
// record, `,"prev":"<hex>"` right after. ok is false for any other layout.
func fastHeader(rec []byte) (h recordHeader, ok bool) {
	switch {
	case bytes.HasPrefix(rec, []byte(`{"f":1,`)):
		return recordHeader{F: FormatLegacy}, true
	case !bytes.HasPrefix(rec, []byte(`{"f":2,`)):
		return h, false
	}
	h.F = FormatChained
	i := bytes.Index(rec, []byte(`,"n":`))
	if i < 0 {
		return h, false
	}
	rest := rec[i+len(`,"n":`):]
	d := 0
	for d < len(rest) && rest[d] >= '0' && rest[d] <= '9' {
		h.N = h.N*10 + uint64(rest[d]-'0')
		d++
	}
	if d == 0 || d > 19 {
		return h, false
	}
	rest = rest[d:]
	if p := []byte(`,"prev":"`); bytes.HasPrefix(rest, p) {
		rest = rest[len(p):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 {
			return h, false
		}
		h.Prev = string(rest[:end])
	}
	return h, true
}

// slowHeader reads the header with a JSON decoder, for a layout other than
// EncodeCommit's (the fields in any order): it reads every field.
func slowHeader(rec []byte) (recordHeader, error) {
	var h recordHeader
	dec := json.NewDecoder(bytes.NewReader(rec))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return h, fmt.Errorf("a record is a JSON object: %v", err)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return h, err
		}
		switch t {
		case "f":
			err = dec.Decode(&h.F)
		case "n":
			err = dec.Decode(&h.N)
		case "prev":
			err = dec.Decode(&h.Prev)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return h, err
		}
	}
	return h, nil
}
