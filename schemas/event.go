package schemas

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Aggregate kinds: an Event's AggregateType, the aggregate token of its feed
// subject, and the first argument of the events query.
const (
	AggWorkspace = "workspace"
	AggGoal      = "goal"
	AggTask      = "task"
	AggRitual    = "ritual"   // its id is "<workspace>:<name>"
	AggSchedule  = "schedule" // its id is "<workspace>:<name>"
)

// Event is the envelope of one domain event: as the log stores it, the feed
// publishes it (on dwr.ev.<workspace>.<aggregate>.<id>.<event>, with its
// log sequence in header Dwr-Log-Seq) and the events query lists it.
//
// The payload (Data) is the event's own JSON (events/<type>.json describes
// it). Raw holds the exact stored bytes of the envelope; the per-aggregate
// hash chain is computed over them, so they are never rewritten.
type Event struct {
	// ID is a ULID, assigned by the committer if empty.
	ID string `json:"id"`
	// Type is the event's stable name, e.g. "task.created".
	Type string `json:"type"`
	// SchemaVersion is the version of the payload's shape for this Type.
	SchemaVersion int `json:"v"`
	// Workspace is the workspace the event belongs to.
	Workspace string `json:"ws"`
	// AggregateType is the kind of aggregate: AggWorkspace, AggGoal, ...
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
	sum := sha256.Sum256(e.Raw)
	return hex.EncodeToString(sum[:])
}
