package eventstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	fastjson "github.com/go-json-experiment/json/v1"
)

// Kinds of commit records.
const (
	// KindEpoch marks a writer taking over the log. It carries no events.
	KindEpoch = "epoch"
	// KindEvents carries a batch of events and command results.
	KindEvents = "events"
	// KindAccept records that an operator accepted the verified prefix of a
	// damaged log: the records between that prefix and this record are not
	// part of the history. It carries an Acceptance and no events.
	KindAccept = "accept"
)

// Record formats. EncodeCommit writes FormatChained; DecodeCommit reads
// both.
const (
	// FormatLegacy (1) is the format before the log was chained: no
	// position, no previous hash, no MAC. Such records are accepted only as
	// the beginning of a partition, before its first FormatChained record
	// (a log written by an older dwr); the chain starts at that record, which
	// counts them in its position and carries the hash of the last of them.
	FormatLegacy = 1
	// FormatChained (2) records carry their position in the partition, the
	// hash of the previous record and an HMAC under the log key.
	FormatChained = 2
)

// Commit is one log record: the unit of a group commit.
//
// A record of kind KindEpoch fences older writers; a record of kind KindEvents
// holds the events and replies of every command applied in one batch; a
// record of kind KindAccept closes a damaged stretch of the log. Every record
// carries the epoch of the writer that appended it; since a writer can only
// append after the last record it has seen, epochs never decrease along the
// log.
//
// The records of a partition form a chain: each carries its position N
// (1, 2, 3, ... without gaps) and Prev, the hash of the previous record's
// stored bytes, and is authenticated by an HMAC under the log key. A missing,
// changed, repeated or foreign record therefore breaks the chain where it is
// (see LogVerifier).
type Commit struct {
	// Kind is KindEpoch, KindEvents or KindAccept.
	Kind string
	// Epoch is the epoch of the writer that wrote the record.
	Epoch uint64
	// Writer identifies the writer process.
	Writer string
	// Time is when the record was built, in UTC.
	Time time.Time
	// N is the record's position in its partition, from 1. For a record of
	// FormatLegacy it is not stored; a LogVerifier sets it from the record's
	// place.
	N uint64
	// Prev is the hex SHA-256 of the stored bytes of the previous record of
	// the partition, "" for the first one.
	Prev string
	// Events are stored as an array of JSON objects; each one's Raw is what
	// the hash chain covers.
	Events []Event
	// Results holds one entry per command applied in this commit.
	Results []CommandResult
	// Accept is what a record of kind KindAccept accepts; nil otherwise.
	Accept *Acceptance

	// Format is the record's format, set by EncodeCommit and DecodeCommit.
	Format int
	// KeyID is the ID of the log key whose MAC the record carries, set by
	// EncodeCommit and DecodeCommit ("" for FormatLegacy).
	KeyID string
	// Hash is the hex SHA-256 of the record's stored bytes (the next
	// record's Prev), set by EncodeCommit and DecodeCommit.
	Hash string
}

// Acceptance is the content of a KindAccept record: an operator accepted the
// verified prefix of the partition that ends with the record at AfterSeq.
// The record chains on that record (its Prev is that record's hash, its N one
// above); the records found between them are outside the history. Whatever
// of them could be named is listed, as lost.
type Acceptance struct {
	// AfterSeq and AfterN are the stream sequence and position of the last
	// record of the accepted prefix (0 and 0 when nothing of the log was
	// kept).
	AfterSeq uint64 `json:"after_seq"`
	AfterN   uint64 `json:"after_n"`
	// Problem is what verification found after the prefix.
	Problem string `json:"problem"`
	// UpToSeq is the partition's last sequence when the acceptance was
	// made: every record after the prefix up to it is discarded (and
	// whatever was derived from them).
	UpToSeq uint64 `json:"up_to_seq"`
	// Discarded is the number of records present in the log between the
	// prefix and this record: they stay (the log cannot delete) but are no
	// longer part of it. FromSeq is the sequence of the first of them.
	Discarded uint64 `json:"discarded"`
	FromSeq   uint64 `json:"from_seq,omitempty"`
	// LostToN is, when the views had seen further than the log now holds,
	// the last position they had applied.
	LostToN uint64 `json:"lost_to_n,omitempty"`
	// Lost names the commands known lost, as "<workspace>/<command id>", at
	// most MaxAcceptLost of them; LostMore counts the rest.
	Lost     []string `json:"lost,omitempty"`
	LostMore int      `json:"lost_more,omitempty"`
	// Unnamed counts the lost records whose commands cannot be named
	// (missing from the log, or undecodable).
	Unnamed int `json:"unnamed,omitempty"`
	// By says who accepted, e.g. "dwr serve --accept-verified-prefix".
	By string `json:"by,omitempty"`
}

// MaxAcceptLost bounds the commands an Acceptance lists.
const MaxAcceptLost = 1000

// CommandResult is the reply of one command applied in a commit, kept so that
// a retry of the same command id can be answered with the first outcome.
type CommandResult struct {
	// Workspace is the command's workspace.
	Workspace string `json:"ws"`
	// CommandID is the command's id. With Actor it is unique within the
	// workspace: a command id belongs to its sender (domain.CommandKey).
	CommandID string `json:"cmd"`
	// Actor is who sent the command (the events' actor); empty for none.
	Actor string `json:"actor,omitempty"`
	// Reply is the answer given to the command, opaque JSON.
	Reply json.RawMessage `json:"reply,omitempty"`
	// Error, instead of Reply, is the error the command was refused with
	// when the refusal itself was recorded in the commit, opaque JSON.
	Error json.RawMessage `json:"error,omitempty"`
	// Body names the command as it was sent, "<name>:<digest>"
	// (domain.Meta.Body): the same id with another body is refused.
	Body string `json:"body,omitempty"`
}

// commitWire is the stored shape of a Commit. The field order is the order
// of the stored bytes; the MAC comes last.
type commitWire struct {
	Format  int               `json:"f"`
	Kind    string            `json:"kind"`
	Epoch   uint64            `json:"epoch"`
	Writer  string            `json:"writer"`
	Time    time.Time         `json:"time"`
	N       uint64            `json:"n,omitempty"`
	Prev    string            `json:"prev,omitempty"`
	Events  []json.RawMessage `json:"events,omitempty"`
	Results []CommandResult   `json:"results,omitempty"`
	Accept  *Acceptance       `json:"accept,omitempty"`
	KeyID   string            `json:"kid,omitempty"`
	MAC     string            `json:"mac,omitempty"`
}

// EncodeCommit encodes c as one log record of FormatChained: compact,
// deterministic JSON, ending with an HMAC under key over everything before
// it. It encodes every event first, setting its Raw (and normalising its
// Time, and c.Time, to UTC), so the record embeds exactly the bytes the
// aggregates' hash chains cover. It sets c.Format, c.KeyID and c.Hash. c.N and
// c.Prev must be set by the caller (the committer chains its records).
//
// It returns an error if c or one of its events is malformed (no kind, no
// position, an epoch record with events, an event without type, aggregate or
// version) or key is nil, and an error wrapping ErrTooLarge if the record
// exceeds MaxRecordBytes.
func EncodeCommit(c *Commit, key *LogKey) ([]byte, error) { return encodeCommit(c, key, false) }

// encodeCommit is EncodeCommit; with linked, c's events were encoded by
// ChainTx.Link with every field they are stored with, and their Raw is
// spliced in as it is instead of being encoded a second time.
func encodeCommit(c *Commit, key *LogKey, linked bool) ([]byte, error) {
	if key == nil {
		return nil, errors.New("eventstore: encode commit: no log key")
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.N == 0 {
		return nil, fmt.Errorf("eventstore: %s record without a position", c.Kind)
	}
	c.Time = c.Time.UTC()
	size := 0
	for i := range c.Events {
		if linked && len(c.Events[i].Raw) > 0 {
			size += len(c.Events[i].Raw) + 1
			continue
		}
		if err := encodeEvent(&c.Events[i]); err != nil {
			return nil, err
		}
		size += len(c.Events[i].Raw) + 1
	}
	// The header is commitWire's without events, results, acceptance, key
	// and MAC; the events are spliced in as they are (encode made them
	// compact, as json.Marshal would), so the record is the bytes
	// json.Marshal(commitWire) gives without scanning every event a second
	// time.
	head, err := fastjson.Marshal(&commitWire{Format: FormatChained, Kind: c.Kind, Epoch: c.Epoch, Writer: c.Writer, Time: c.Time,
		N: c.N, Prev: c.Prev})
	if err != nil {
		return nil, fmt.Errorf("eventstore: encode commit: %w", err)
	}
	var results, accept []byte
	if len(c.Results) > 0 {
		if results, err = fastjson.Marshal(c.Results); err != nil {
			return nil, fmt.Errorf("eventstore: encode commit: %w", err)
		}
	}
	if c.Accept != nil {
		if accept, err = fastjson.Marshal(c.Accept); err != nil {
			return nil, fmt.Errorf("eventstore: encode commit: %w", err)
		}
	}
	b := make([]byte, 0, len(head)+size+len(results)+len(accept)+len(key.ID())+macSuffix+48)
	b = append(b, head[:len(head)-1]...)
	if len(c.Events) > 0 {
		b = append(b, `,"events":[`...)
		for i := range c.Events {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, c.Events[i].Raw...)
		}
		b = append(b, ']')
	}
	if results != nil {
		b = append(b, `,"results":`...)
		b = append(b, results...)
	}
	if accept != nil {
		b = append(b, `,"accept":`...)
		b = append(b, accept...)
	}
	b = append(b, `,"kid":"`...)
	b = append(b, key.ID()...)
	b = append(b, '"')
	mac := key.sum(b)
	b = append(b, macOpen...)
	b = append(b, mac...)
	b = append(b, `"}`...)
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: commit of %d events is %d bytes, limit %d", ErrTooLarge, len(c.Events), len(b), MaxRecordBytes)
	}
	c.Format, c.KeyID, c.Hash = FormatChained, key.ID(), hashBytes(b)
	return b, nil
}

// DecodeCommit decodes one log record of either format; it does not check
// its MAC (LogKey.Authentic and LogVerifier do). Records larger than
// MaxRecordBytes are refused before decoding, with an error wrapping
// ErrTooLarge. A record that is not valid JSON, has an unknown format or
// kind, lacks what its format requires, or holds a malformed event gives an
// error wrapping ErrCorrupt. Each decoded event's Raw is its exact stored
// bytes, independent of b; the commit's Hash is b's SHA-256.
func DecodeCommit(b []byte) (*Commit, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record of %d bytes, limit %d", ErrTooLarge, len(b), MaxRecordBytes)
	}
	var w commitWire
	if err := fastjson.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	switch w.Format {
	case FormatLegacy:
		if w.N != 0 || w.Prev != "" || w.Accept != nil || w.KeyID != "" || w.MAC != "" {
			return nil, fmt.Errorf("%w: a record of format %d with the fields of format %d", ErrCorrupt, FormatLegacy, FormatChained)
		}
	case FormatChained:
		if w.N == 0 || w.KeyID == "" {
			return nil, fmt.Errorf("%w: a record of format %d without position or key id", ErrCorrupt, FormatChained)
		}
		if _, mac, err := splitMAC(b); err != nil || mac != w.MAC {
			return nil, fmt.Errorf("%w: a record of format %d that does not end with its mac", ErrCorrupt, FormatChained)
		}
	default:
		return nil, fmt.Errorf("%w: record format %d, want %d or %d", ErrCorrupt, w.Format, FormatLegacy, FormatChained)
	}
	c := &Commit{
		Kind:    w.Kind,
		Epoch:   w.Epoch,
		Writer:  w.Writer,
		Time:    w.Time,
		N:       w.N,
		Prev:    w.Prev,
		Results: w.Results,
		Accept:  w.Accept,
		Format:  w.Format,
		KeyID:   w.KeyID,
		Hash:    hashBytes(b),
	}
	if len(w.Events) > 0 {
		c.Events = make([]Event, len(w.Events))
	}
	for i, raw := range w.Events {
		e, err := decodeEvent(raw)
		if err != nil {
			return nil, err
		}
		c.Events[i] = e
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return c, nil
}

// Commands returns "<workspace>/<command id>" of every command whose result
// the record holds, in order.
func (c *Commit) Commands() []string {
	out := make([]string, 0, len(c.Results))
	for _, r := range c.Results {
		out = append(out, CommandName(r.Workspace, r.Actor, r.CommandID))
	}
	return out
}

// CommandName names a command for people: "<workspace>/<id>", and "(by
// <actor>)" when it has a sender.
func CommandName(ws, actor, id string) string {
	if actor == "" {
		return ws + "/" + id
	}
	return ws + "/" + id + " (by " + actor + ")"
}

func (c *Commit) validate() error {
	switch c.Kind {
	case KindEpoch, KindAccept:
		if len(c.Events) > 0 || len(c.Results) > 0 {
			return fmt.Errorf("eventstore: %s record with %d events and %d results", c.Kind, len(c.Events), len(c.Results))
		}
	case KindEvents:
	default:
		return fmt.Errorf("eventstore: unknown commit kind %q", c.Kind)
	}
	if (c.Kind == KindAccept) != (c.Accept != nil) {
		return fmt.Errorf("eventstore: %s record with acceptance %v", c.Kind, c.Accept != nil)
	}
	if c.Epoch == 0 {
		return fmt.Errorf("eventstore: %s record without epoch", c.Kind)
	}
	return nil
}
