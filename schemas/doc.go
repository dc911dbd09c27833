// Package schemas is dwr's wire contract: a JSON Schema (draft 2020-12) for
// every command, every event's data, the event envelope and the replies, and
// the validation that the edge runs on every request before it decodes it.
//
// The schemas are embedded files, published as they are (see All) so that a
// client in any language can rely on them:
//
//	common.json              shared $defs (TaskSpec, RetryPolicy, ULID, ...)
//	commands/<name>.json     the body of dwr.cmd.<workspace>.<name>
//	events/<type>.json       the data of an event of that type
//	envelope.json            an event as stored and published
//	reply.json, error.json   a command's reply: success, or refusal
//	work_item.json           a work item on dwr.work.<workspace>.<queue>
//	query.json               the body of dwr.q.<workspace>.<query>
//
// The same contract is here as plain Go types, shared by the service, the
// executor SDK and every Go client, like river's rivertype: the reply
// envelope (Reply) and its error (Error, with a Code* constant and a
// sentinel for each code), the headers (HeaderCommandID, ...), every
// command's body (ClaimTask, ReportSuccess, ...; Command names them), the
// command result (CommandResult), the states a query or a claim returns
// (Task, Attempt, Approval, Goal, ...), the query body (Query) and the work
// item (WorkItem). The domain names them by aliases; a test checks every Go
// type against its schema, property for property.
//
// Validation runs in a fixed order: CheckBounds bounds the message's size
// and nesting without decoding it; only then is it decoded and checked
// against its schema, which bounds every string and list. A refusal is an
// *Error whose Code is a wire error code and whose Fields name every
// offending field by its JSON pointer.
//
// The package may import the standard library and
// github.com/santhosh-tekuri/jsonschema/v6 only (the files of Go types, the
// standard library alone); it never imports another package of this module
// (its tests may import domain, to prove that the schemas describe the
// domain's events and that the domain decodes what they accept).
package schemas
