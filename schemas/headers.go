package schemas

// Headers of the wire contract.
const (
	// HeaderCommandID is a command's idempotency key: a retry with the same
	// id from the same identity is answered with the first outcome.
	HeaderCommandID = "Dwr-Command-Id"
	// HeaderCorrelationID groups the events caused by one original request.
	HeaderCorrelationID = "Dwr-Correlation-Id"
	// HeaderMinSeq makes a query wait (up to 5 s) until the views reflect
	// the log sequence it names: a reply's Seq, to read your own writes.
	HeaderMinSeq = "Dwr-Min-Seq"
	// HeaderLogSeq carries, on every message of the event feed, the log
	// sequence of the record that holds the event.
	HeaderLogSeq = "Dwr-Log-Seq"
)
