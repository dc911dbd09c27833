package projections

// PebbleGets returns how many lookups of s reached Pebble.
func PebbleGets(s *Store) int64 { return s.pebbleGets.Load() }
