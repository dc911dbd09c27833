package eventstore

import "errors"

// Sentinel errors. Callers branch on them with errors.Is; the returned errors
// usually wrap them with more context.
var (
	// ErrConflict reports that an append's expectation about the log's last
	// sequence did not hold: someone else appended first. Nothing was appended.
	ErrConflict = errors.New("eventstore: conflicting append")

	// ErrFenced reports that a newer writer has taken over the log (it appended
	// an epoch record), so this writer must step down. Nothing of the failed
	// append landed.
	ErrFenced = errors.New("eventstore: writer fenced by a newer epoch")

	// ErrTooLarge reports a record larger than the log accepts
	// (MaxRecordBytes, or the committer's configured limit). Nothing was appended.
	ErrTooLarge = errors.New("eventstore: record too large")

	// ErrStorageFull reports an append the log's store refused for want of
	// room (JetStream's store limit, or its account's): nothing was
	// appended, and nothing can be until room is made.
	ErrStorageFull = errors.New("eventstore: the log's storage is full")

	// ErrUnknownOutcome reports an append whose result is unknown: the record
	// may or may not have landed. A writer must re-read the log before writing
	// again.
	ErrUnknownOutcome = errors.New("eventstore: append outcome unknown")

	// ErrStopped is returned by a committer that has stopped running.
	ErrStopped = errors.New("eventstore: committer stopped")

	// ErrCorrupt reports a record or event that cannot be decoded or violates
	// the record format.
	ErrCorrupt = errors.New("eventstore: corrupt record")

	// ErrIntegrity is wrapped by every error reporting that the log, or the
	// stream holding it, is not what was written: a record missing, changed,
	// repeated or foreign, the log ending before what was already seen of
	// it, or a stream configuration that lets it lose records. Nothing may
	// be served from such a log (see IntegrityError, StreamConfigError).
	ErrIntegrity = errors.New("eventstore: log integrity")

	// ErrUnknownSchema reports an event whose schema version cannot be brought
	// to the current one: it is newer than the current version, or an upcaster
	// in the chain is missing.
	ErrUnknownSchema = errors.New("eventstore: unknown event schema version")
)
