package projections

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// keyFilter is a Bloom filter of the views' goal, task and command keys.
// The writer looks up every command id it is sent (has it been answered?)
// and the id of every goal and task it creates; almost all of those are new,
// and Pebble answers "not found" only after searching its memtables and
// tables — ~4 % of a goal.create's CPU for the command id alone. A key the
// filter has never seen is answered absent at once.
//
// It never answers absent for a key the views hold: Open adds every such
// key before the store is used, and apply adds each key a batch writes
// before the batch is committed, so a reader that can see the key sees its
// bits. Keys deleted later stay in it (a lookup then asks Pebble). Past a
// few million keys its false positives grow (0.07 % at a million, a third
// at five million), and lookups go on to Pebble more often: slower, never
// wrong.
type keyFilter struct {
	seed maphash.Seed
	bits []atomic.Uint64
}

const (
	filterBits   = 1 << 24 // 2 MiB
	filterHashes = 6
)

func newKeyFilter() *keyFilter {
	return &keyFilter{seed: maphash.MakeSeed(), bits: make([]atomic.Uint64, filterBits/64)}
}

// filtered reports whether k is a key the filter covers: a goal's, a task's
// or a command's (g/, t/, c/; not gw/, tw/, ... which share a letter).
func filtered(k []byte) bool {
	return len(k) > 2 && k[1] == '/' && (k[0] == 'g' || k[0] == 't' || k[0] == 'c')
}

// hashes returns the two hashes of k whose combinations h1 + i·h2 are its
// filterHashes positions.
func (f *keyFilter) hashes(k []byte) (h1, h2 uint64) {
	h := maphash.Bytes(f.seed, k)
	return h & 0xffffffff, h>>32 | 1
}

func (f *keyFilter) add(k []byte) {
	h1, h2 := f.hashes(k)
	for i := range uint64(filterHashes) {
		p := (h1 + i*h2) % filterBits
		f.bits[p/64].Or(1 << (p % 64))
	}
}

// mayContain reports false only for a key never added.
func (f *keyFilter) mayContain(k []byte) bool {
	h1, h2 := f.hashes(k)
	for i := range uint64(filterHashes) {
		p := (h1 + i*h2) % filterBits
		if f.bits[p/64].Load()&(1<<(p%64)) == 0 {
			return false
		}
	}
	return true
}

// addBatch adds the covered keys batch b writes (none to a nil filter).
func (f *keyFilter) addBatch(b *pebble.Batch) error {
	if f == nil {
		return nil
	}
	r := b.Reader()
	for {
		_, k, _, ok, err := r.Next()
		if err != nil || !ok {
			return err
		}
		if filtered(k) {
			f.add(k)
		}
	}
}

// fill adds every covered key of db.
func (f *keyFilter) fill(db *pebble.DB) error {
	for _, p := range [][]byte{[]byte(pGoal + "/"), []byte(pTask + "/"), []byte(pCommand + "/")} {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: upperBound(p), KeyTypes: pebble.IterKeyTypePointsOnly})
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() { // the bounds keep it to the prefix
			f.add(it.Key())
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}
