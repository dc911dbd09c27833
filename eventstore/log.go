package eventstore

import "context"

// MaxRecordBytes is the largest record a Log accepts: 1 MiB (the NATS default
// max_payload) minus 64 KiB of headroom for headers and protocol overhead.
const MaxRecordBytes = 1<<20 - 64<<10

// Log is an append-only sequence of raw records, the source of truth.
//
// Sequences are positive and increase along the log; they need not be
// contiguous (a JetStream log uses stream sequences, which other partitions of
// the same stream also consume). 0 means "before the first record".
//
// Every implementation must pass the conformance suite in eventstore/logtest.
type Log interface {
	// Append stores rec as the next record if and only if the log's last
	// sequence is expectedLast, and returns the new record's sequence.
	//
	// Appending the same rec with the same expectedLast again (a blind retry)
	// returns the sequence of the first append and stores nothing.
	//
	// Errors: one wrapping ErrConflict when the expectation fails (nothing
	// was appended); one wrapping ErrTooLarge when rec exceeds MaxRecordBytes
	// (nothing was appended); one wrapping ErrStorageFull when the store has
	// no room for it (nothing was appended); anything else (wrapping ErrUnknownOutcome where
	// the implementation can tell) means the record may or may not have
	// landed.
	Append(ctx context.Context, rec []byte, expectedLast uint64) (uint64, error)

	// LastSeq returns the sequence of the last record, or 0 if the log is
	// empty.
	LastSeq(ctx context.Context) (uint64, error)

	// Stat returns what the log itself says about its records: how many
	// there are and the sequences of the first and the last (all 0 when it
	// is empty). It returns an error if the log cannot be asked.
	Stat(ctx context.Context) (LogStat, error)

	// Read calls fn, in order, for each record whose sequence is at least
	// from and at most the last sequence at the time of the call. fn must not
	// keep rec after it returns. Read returns fn's first error unchanged, or
	// ctx's error, or an error reading the log.
	Read(ctx context.Context, from uint64, fn func(seq uint64, rec []byte) error) error

	// Record returns the record at seq. A seq the log holds no record at
	// (none was appended there: the log deletes nothing) gives an error
	// wrapping ErrIntegrity.
	Record(ctx context.Context, seq uint64) ([]byte, error)

	// Tail calls fn, in order, for every record whose sequence is at least
	// from, waiting for new records, until ctx is done (it then returns ctx's
	// error) or fn returns an error (returned unchanged).
	Tail(ctx context.Context, from uint64, fn func(seq uint64, rec []byte) error) error
}

// LogStat is a log's own account of its records, to check against what was
// verified (see CheckStat).
type LogStat struct {
	// Records is the number of records.
	Records uint64
	// First and Last are the sequences of the first and the last record.
	First, Last uint64
}
