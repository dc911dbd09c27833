package projections

import (
	"encoding/json"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
)

// DomainUpcasters returns the upcasters of the domain's event types, for
// Options.Upcasters: every event is read at the schema version the code
// knows, however old its stored form.
func DomainUpcasters() *eventstore.Upcasters {
	u := eventstore.NewUpcasters()
	for _, t := range domain.EventTypes() {
		u.SetCurrent(t, domain.SchemaVersion(t))
	}
	for t, ups := range domain.Upcasts() {
		for i, up := range ups {
			u.Register(t, i+1, eventstore.UpcastFunc(func(d json.RawMessage) (json.RawMessage, error) { return up(d) }))
		}
	}
	return u
}
