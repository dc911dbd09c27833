// Package console is the web console of `dwr serve`: goals with their plan
// graphs (live over server-sent events), their labels (set, removed and
// filtered by), their priority (set) and their key (shown, and gone to from
// the goals list), the tasks holding given labels (listed by them, as the
// goals are), a task's timeline with its verified history, the
// approvals inbox (decisions signed in the browser) and the queues, served
// from assets embedded in the binary (assets/: plain HTML, JavaScript and
// CSS, no build step).
//
// The console is a client of dwr like any other: a person signs in with
// their credential file, whose seed stays in the browser (the page signs
// the NATS server's nonce with it); the console holds the NATS connection so
// made, as that identity, in an in-memory session, and sends every query
// and command through executors/client on it, so the service's role checks
// and the NATS permissions of that identity apply.
//
// It may import the standard library, schemas, executors/client, nats.go
// and nkeys: never the service's packages (the depguard rule "console").
package console
