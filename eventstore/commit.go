package eventstore

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kinds of commit records.
const (
	// KindEpoch marks a writer taking over the log. It carries no events.
	KindEpoch = "epoch"
	// KindEvents carries a batch of events and command results.
	KindEvents = "events"
)

// recordFormat is the version of the record encoding written by EncodeCommit.
// DecodeCommit refuses any other.
const recordFormat = 1

// Commit is one log record: the unit of a group commit.
//
// A record of kind KindEpoch fences older writers; a record of kind KindEvents
// holds the events and replies of every command applied in one batch. Every
// record carries the epoch of the writer that appended it; since a writer can
// only append after the last record it has seen, epochs never decrease along
// the log.
type Commit struct {
	// Kind is KindEpoch or KindEvents.
	Kind string
	// Epoch is the epoch of the writer that wrote the record.
	Epoch uint64
	// Writer identifies the writer process.
	Writer string
	// Time is when the record was built, in UTC.
	Time time.Time
	// Events are stored as an array of JSON objects; each one's Raw is what
	// the hash chain covers.
	Events []Event
	// Results holds one entry per command applied in this commit.
	Results []CommandResult
}

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
}

// commitWire is the stored shape of a Commit.
type commitWire struct {
	Format  int               `json:"f"`
	Kind    string            `json:"kind"`
	Epoch   uint64            `json:"epoch"`
	Writer  string            `json:"writer"`
	Time    time.Time         `json:"time"`
	Events  []json.RawMessage `json:"events,omitempty"`
	Results []CommandResult   `json:"results,omitempty"`
}

// EncodeCommit encodes c as one log record: compact, deterministic JSON. It
// encodes every event first, setting its Raw (and normalising its Time, and
// c.Time, to UTC), so the record embeds exactly the bytes the hash chain
// covers.
//
// It returns an error if c or one of its events is malformed (no kind, an
// epoch record with events, an event without type, aggregate or version), and
// an error wrapping ErrTooLarge if the record exceeds MaxRecordBytes.
func EncodeCommit(c *Commit) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	c.Time = c.Time.UTC()
	size := 0
	for i := range c.Events {
		if err := c.Events[i].encode(); err != nil {
			return nil, err
		}
		size += len(c.Events[i].Raw) + 1
	}
	// The header is commitWire's without events and results; the events are
	// spliced in as they are (encode made them compact, as json.Marshal
	// would), so the record is the bytes json.Marshal(commitWire) gives
	// without scanning every event a second time.
	head, err := json.Marshal(&commitWire{Format: recordFormat, Kind: c.Kind, Epoch: c.Epoch, Writer: c.Writer, Time: c.Time})
	if err != nil {
		return nil, fmt.Errorf("eventstore: encode commit: %w", err)
	}
	var results []byte
	if len(c.Results) > 0 {
		if results, err = json.Marshal(c.Results); err != nil {
			return nil, fmt.Errorf("eventstore: encode commit: %w", err)
		}
	}
	b := make([]byte, 0, len(head)+size+len(results)+32)
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
	b = append(b, '}')
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: commit of %d events is %d bytes, limit %d", ErrTooLarge, len(c.Events), len(b), MaxRecordBytes)
	}
	return b, nil
}

// DecodeCommit decodes one log record. Records larger than MaxRecordBytes are
// refused before decoding, with an error wrapping ErrTooLarge. A record that
// is not valid JSON, has an unknown format or kind, or holds a malformed event
// gives an error wrapping ErrCorrupt. Each decoded event's Raw is its exact
// stored bytes, independent of b.
func DecodeCommit(b []byte) (*Commit, error) {
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record of %d bytes, limit %d", ErrTooLarge, len(b), MaxRecordBytes)
	}
	var w commitWire
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if w.Format != recordFormat {
		return nil, fmt.Errorf("%w: record format %d, want %d", ErrCorrupt, w.Format, recordFormat)
	}
	c := &Commit{
		Kind:    w.Kind,
		Epoch:   w.Epoch,
		Writer:  w.Writer,
		Time:    w.Time,
		Results: w.Results,
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

func (c *Commit) validate() error {
	switch c.Kind {
	case KindEpoch:
		if len(c.Events) > 0 || len(c.Results) > 0 {
			return fmt.Errorf("eventstore: epoch record with %d events and %d results", len(c.Events), len(c.Results))
		}
	case KindEvents:
	default:
		return fmt.Errorf("eventstore: unknown commit kind %q", c.Kind)
	}
	if c.Epoch == 0 {
		return fmt.Errorf("eventstore: %s record without epoch", c.Kind)
	}
	return nil
}
