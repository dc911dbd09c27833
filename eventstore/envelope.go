package eventstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	fastjson "github.com/go-json-experiment/json/v1"

	"github.com/dwr-run/dwr/schemas"
)

// Event is the envelope of one domain event as it is stored in the log, the
// feed publishes it and the events query lists it: schemas.Event, the wire
// type. The payload (Data) is opaque JSON that this package never
// interprets; Raw holds the exact stored bytes, over which the hash chain is
// computed, so they are never rewritten (not even by upcasting).
type Event = schemas.Event

func hashBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// encodeEvent validates e, normalises Time to UTC and sets e.Raw to the canonical
// encoding: compact JSON with the fields in declaration order, so the same
// event always encodes to the same bytes.
func encodeEvent(e *Event) error {
	if err := validateEvent(e); err != nil {
		return err
	}
	e.Time = e.Time.UTC()
	raw, err := fastjson.Marshal(e)
	if err != nil {
		return fmt.Errorf("eventstore: encode event %s %s/%s v%d: %w", e.Type, e.AggregateType, e.AggregateID, e.Version, err)
	}
	e.Raw = raw
	return nil
}

// decodeEvent decodes one stored event and keeps raw as its Raw.
func decodeEvent(raw []byte) (Event, error) {
	var e Event
	if err := fastjson.Unmarshal(raw, &e); err != nil {
		return Event{}, fmt.Errorf("%w: event: %w", ErrCorrupt, err)
	}
	if err := validateEvent(&e); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	e.Raw = raw
	return e, nil
}

func validateEvent(e *Event) error {
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
