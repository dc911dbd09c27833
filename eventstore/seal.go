package eventstore

import "github.com/dwr-run/dwr/schemas/seal"

// The keyring's data keys seal and open payloads with package seal, the
// sealed-value format the executors' SDK shares; these names are its.
type (
	// DataKey seals and opens payloads (seal.DataKey).
	DataKey = seal.DataKey
	// KeyFunc returns the data key of a scope (seal.KeyFunc).
	KeyFunc = seal.KeyFunc
)

// DataKeyBytes is the size of a data key.
const DataKeyBytes = seal.DataKeyBytes

// ScopeWorkspace is the scope of a workspace's own data key.
const ScopeWorkspace = seal.ScopeWorkspace

// ErrShredded is the error of a data key that was shredded: what it sealed
// can never be read again.
var ErrShredded = seal.ErrShredded

// GoalScope returns the scope of goal id's own data key.
func GoalScope(id string) string { return seal.GoalScope(id) }

// NewDataKey returns the data key of the 32 bytes raw.
func NewDataKey(raw []byte) (*DataKey, error) { return seal.NewDataKey(raw) }

// OpenAll returns b with every sealed value opened (seal.OpenAll).
func OpenAll(b []byte, ws string, key KeyFunc) ([]byte, error) { return seal.OpenAll(b, ws, key) }
