package eventstore

import (
	"encoding/json"
	"fmt"
	"sync"
)

// UpcastFunc turns the payload of one schema version of an event type into
// the payload of the next version.
type UpcastFunc func(json.RawMessage) (json.RawMessage, error)

// Upcasters brings stored event payloads up to the schema version the code
// understands, one version at a time. Configure it with Register and
// SetCurrent at start-up; Upcast is safe for concurrent use.
//
// Upcasting runs after chain verification: it changes Data and SchemaVersion
// and never Raw, which stays the stored bytes the hash chain covers.
type Upcasters struct {
	mu      sync.RWMutex
	fns     map[upcastKey]UpcastFunc
	current map[string]int
}

type upcastKey struct {
	typ  string
	from int
}

// NewUpcasters returns an empty registry: every event is left as stored.
func NewUpcasters() *Upcasters {
	return &Upcasters{fns: make(map[upcastKey]UpcastFunc), current: make(map[string]int)}
}

// Register sets fn as the upcaster of eventType from fromVersion to
// fromVersion+1. It panics if fn is nil or one is already registered for the
// same type and version: registration is start-up configuration, and a
// mistake in it is a programming error.
func (u *Upcasters) Register(eventType string, fromVersion int, fn UpcastFunc) {
	if fn == nil {
		panic(fmt.Sprintf("eventstore: nil upcaster for %s v%d", eventType, fromVersion))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	k := upcastKey{eventType, fromVersion}
	if _, dup := u.fns[k]; dup {
		panic(fmt.Sprintf("eventstore: upcaster for %s v%d registered twice", eventType, fromVersion))
	}
	u.fns[k] = fn
}

// SetCurrent sets the schema version of eventType that the code reads. Events
// of a type without a current version are left as stored.
func (u *Upcasters) SetCurrent(eventType string, v int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.current[eventType] = v
}

// Upcast brings e's Data and SchemaVersion to the current version of its type
// by applying the registered upcasters in order. It returns an error wrapping
// ErrUnknownSchema if e is newer than the current version or an upcaster in
// the chain is missing, and the upcaster's error (wrapped) if one fails or
// returns invalid JSON; e is unchanged on error.
func (u *Upcasters) Upcast(e *Event) error {
	u.mu.RLock()
	defer u.mu.RUnlock()
	cur, ok := u.current[e.Type]
	if !ok || e.SchemaVersion == cur {
		return nil
	}
	if e.SchemaVersion > cur {
		return fmt.Errorf("%w: %s v%d is newer than v%d", ErrUnknownSchema, e.Type, e.SchemaVersion, cur)
	}
	data := e.Data
	for v := e.SchemaVersion; v < cur; v++ {
		fn, ok := u.fns[upcastKey{e.Type, v}]
		if !ok {
			return fmt.Errorf("%w: no upcaster for %s v%d", ErrUnknownSchema, e.Type, v)
		}
		next, err := fn(data)
		if err != nil {
			return fmt.Errorf("eventstore: upcast %s %s v%d: %w", e.ID, e.Type, v, err)
		}
		if !json.Valid(next) {
			return fmt.Errorf("eventstore: upcast %s %s v%d: result is not valid JSON", e.ID, e.Type, v)
		}
		data = next
	}
	e.Data, e.SchemaVersion = data, cur
	return nil
}
