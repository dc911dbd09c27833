package projections

// PebbleGets returns how many lookups and scans of s reached Pebble.
func PebbleGets(s *Store) int64 { return s.pebbleGets.Load() }

// SetAfterRead has f run between a state's read from Pebble and its caching
// (nil: nothing).
func SetAfterRead(s *Store, f func()) { s.afterRead = f }
