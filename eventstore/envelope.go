package eventstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Event is the envelope of one domain event as it is stored in the log.
//
// The payload (Data) is opaque JSON: this package never interprets it. Raw
// holds the exact stored bytes of the envelope; the hash chain is computed over
// them, so they are never rewritten (not even by upcasting).
type Event struct {
	// ID is a ULID, assigned by the committer if empty.
	ID string `json:"id"`
	// Type is the event's stable name, e.g. "task.created".
	Type string `json:"type"`
	// SchemaVersion is the version of the payload's shape for this Type.
	SchemaVersion int `json:"v"`
	// Workspace is the workspace the event belongs to.
	Workspace string `json:"ws"`
	// AggregateType is the kind of aggregate, e.g. "workspace", "goal", "task".
	AggregateType string `json:"agg"`
	// AggregateID identifies the aggregate within its type.
	AggregateID string `json:"agg_id"`
	// Version is the aggregate's version after this event: 1, 2, 3...
	// contiguous per aggregate.
	Version uint64 `json:"ver"`
	// CommandID is the id of the command that produced the event.
	CommandID string `json:"cmd"`
	// CorrelationID groups events caused by one original request.
	CorrelationID string `json:"corr,omitempty"`
	// Actor is who or what issued the command.
	Actor string `json:"actor,omitempty"`
	// Time is when the event was decided, in UTC.
	Time time.Time `json:"time"`
	// PrevHash is the hex SHA-256 of the stored bytes of the previous event of
	// the same aggregate; empty for version 1.
	PrevHash string `json:"prev,omitempty"`
	// Data is the payload.
	Data json.RawMessage `json:"data"`
	// Raw is the exact stored encoding of the event, set by encoding and
	// decoding. It is not part of the encoding itself.
	Raw []byte `json:"-"`
}

// Hash returns the hex SHA-256 of e.Raw, the value the next event of the same
// aggregate carries as PrevHash. It returns "" if e has not been encoded or
// decoded (Raw is empty).
func (e *Event) Hash() string {
	if len(e.Raw) == 0 {
		return ""
	}
	return hashBytes(e.Raw)
}

func hashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// encode validates e, normalises Time to UTC and sets e.Raw to the canonical
// encoding: compact JSON with the fields in declaration order, so the same
// event always encodes to the same bytes.
func (e *Event) encode() error {
	if err := e.validate(); err != nil {
		return err
	}
	e.Time = e.Time.UTC()
	raw, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("eventstore: encode event %s %s/%s v%d: %w", e.Type, e.AggregateType, e.AggregateID, e.Version, err)
	}
	e.Raw = raw
	return nil
}

// decodeEvent decodes one stored event and keeps raw as its Raw.
func decodeEvent(raw []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(raw, &e); err != nil {
		return Event{}, fmt.Errorf("%w: event: %w", ErrCorrupt, err)
	}
	if err := e.validate(); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	e.Raw = raw
	return e, nil
}

func (e *Event) validate() error {
	switch {
	case e.Type == "":
		return fmt.Errorf("eventstore: event %q has no type", e.ID)
	case e.AggregateType == "" || e.AggregateID == "":
		return fmt.Errorf("eventstore: event %q (%s) has no aggregate", e.ID, e.Type)
	case e.Version == 0:
		return fmt.Errorf("eventstore: event %q (%s) of %s/%s has version 0", e.ID, e.Type, e.AggregateType, e.AggregateID)
	}
	return nil
}
