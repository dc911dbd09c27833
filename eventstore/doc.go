// Package eventstore is dwr's log: the source of truth that every other part
// of the runtime is derived from.
//
// It holds
//
//   - the event envelope ([Event]) and its canonical JSON encoding, whose exact
//     bytes are kept in [Event.Raw] and hashed;
//   - the commit record ([Commit]): one log record carrying a batch of events
//     and the replies of the commands that produced them, an epoch marker, or
//     an acceptance of a damaged log's verified prefix;
//   - the chain over the whole log: every record carries its position and the
//     hash of the previous record, and an HMAC under the log key ([LogKey]);
//     [LogVerifier], [ReadVerified], [CheckStat] and [VerifyLog] find a
//     missing, changed, repeated or foreign record, or a log that ends
//     before what was verified of it ([IntegrityError], [ErrIntegrity]);
//   - the [Log] interface over raw records, with a JetStream implementation
//     ([JetStreamLog], whose stream configuration is declared once and
//     checked, never updated: [StreamConfigError]) and an in-memory one
//     ([MemoryLog]) that pass one conformance suite (package
//     eventstore/logtest);
//   - the group committer ([Committer]): the single writer's loop that batches
//     concurrent requests into one record per append and fences older writers
//     through epoch records;
//   - the per-aggregate hash chain ([ChainVerifier]) and upcasting of old event
//     payloads ([Upcasters]).
//
// The package knows nothing about tasks, goals or workspaces beyond the opaque
// strings in the envelope: event payloads are JSON it never interprets.
//
// Imports: the standard library, github.com/oklog/ulid/v2,
// github.com/nats-io/nats.go (and its jetstream package) and
// github.com/dwr-run/dwr/domain. Nothing else of dwr may be imported here.
package eventstore
