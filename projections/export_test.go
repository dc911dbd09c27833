package projections

import "github.com/dwr-run/dwr/domain"

// PebbleGets returns how many lookups and scans of s reached Pebble.
func PebbleGets(s *Store) int64 { return s.pebbleGets.Load() }

// SetAfterRead has f run between a state's read from Pebble and its caching
// (nil: nothing).
func SetAfterRead(s *Store, f func()) { s.afterRead = f }

// Uncached returns what Pebble holds for task (or goal) id, and the
// dependents and chain tip of task id, passing by the cache.
func Uncached(s *Store, id string) (task *domain.Task, goal *domain.Goal, deps []string, tipVersion uint64, tipHash string, err error) {
	var t domain.Task
	if ok, err := s.get(key(pTask, id), &t); err != nil {
		return nil, nil, nil, 0, "", err
	} else if ok {
		task = &t
	}
	var g domain.Goal
	if ok, err := s.get(key(pGoal, id), &g); err != nil {
		return nil, nil, nil, 0, "", err
	} else if ok {
		goal = &g
	}
	if deps, err = s.scanDependents(id); err != nil {
		return nil, nil, nil, 0, "", err
	}
	typ := domain.AggTask
	if goal != nil {
		typ = domain.AggGoal
	}
	tp, err := s.lastEvent(typ, id)
	return task, goal, deps, tp.Version, tp.Hash, err
}

// CachedBytes returns the stored bytes of the goals and tasks s's cache
// holds.
func CachedBytes(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cacheBytes
}

// Closing reports whether Close (or Reset) has begun turning reads away.
func Closing(s *Store) bool { return s.closing.Load() }
