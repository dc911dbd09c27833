package schemas

// The names a client needs to connect to a dwr deployment that is closed
// (the default): they are part of the wire contract, like the subjects.
const (
	// JetStreamAPIPrefix is where a client account reaches the JetStream
	// calls executors are given (pulling from and reading their queues'
	// consumers): jetstream.NewWithAPIPrefix(nc, JetStreamAPIPrefix).
	JetStreamAPIPrefix = "dwrjs"
)

// InboxPrefix returns the inbox prefix a user with nkey publicKey must
// connect with (nats.CustomInboxPrefix): the only replies the server lets
// it subscribe to, so no other identity can read them.
func InboxPrefix(publicKey string) string { return "_INBOX." + publicKey }
