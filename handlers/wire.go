package handlers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// The wire's types — replies, errors, headers, command bodies, work items —
// are schemas' (schemas.Reply, schemas.Error, schemas.HeaderCommandID, ...):
// this file turns the service's outcomes into them.

// toWire translates any error into its wire form: the one table that maps
// the service's errors to stable codes. Internal errors are logged, never
// shown.
func toWire(err error, logger *slog.Logger) *schemas.Error {
	var de *domain.Error
	var se *schemas.Error
	switch {
	case errors.As(err, &de):
		w := &schemas.Error{Code: string(de.Code), Message: de.Message}
		if de.Field != "" {
			w.Fields = []schemas.FieldError{{Pointer: de.Field, Message: de.Message}}
			w.Message = de.Field + ": " + de.Message
		}
		if !de.RetryAfter.IsZero() {
			at := de.RetryAfter.UTC()
			w.RetryAfter = &at
		}
		return w
	case errors.As(err, &se):
		// The service's own refusals, and schemas' validation errors: the
		// wire form, without an internal cause.
		return &schemas.Error{Code: se.Code, Message: se.Message, Fields: se.Fields, RetryAfter: se.RetryAfter}
	case errors.Is(err, projections.ErrCursor):
		return &schemas.Error{Code: schemas.CodeInvalid, Message: "after is not a cursor of this listing: pass the next that a reply to the same query gave",
			Fields: []schemas.FieldError{{Pointer: "/after", Message: "not a cursor of this listing"}}}
	case errors.Is(err, eventstore.ErrTooLarge):
		return &schemas.Error{Code: schemas.CodeTooLarge, Message: "the command's events do not fit in one log record; split the command (for example a smaller plan)"}
	case errors.Is(err, eventstore.ErrStorageFull):
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "the log's storage is full: nothing of the command was recorded, and no command can be until an operator makes room (JetStream's store limit, dwr serve --max-store, or the disk); retry with the same command id then"}
	case errors.Is(err, eventstore.ErrUnknownOutcome):
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "the outcome is unknown (the writer lost the log mid-append): retry with the same command id to learn it"}
	case errors.Is(err, eventstore.ErrFenced), errors.Is(err, eventstore.ErrStopped), errors.Is(err, errNotWriter):
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "no writer is available right now: retry with the same command id"}
	case errors.Is(err, context.DeadlineExceeded):
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "timed out: retry with the same command id"}
	case errors.Is(err, projections.ErrClosed):
		return &schemas.Error{Code: schemas.CodeUnavailable, Message: "this replica is stopping: retry (another replica, or this one once started again, answers)"}
	}
	logger.Error("handlers: internal error", "err", err)
	return &schemas.Error{Code: schemas.CodeInternal, Message: "internal error: the service logged it; retry, and report it if it persists"}
}

var errNotWriter = errors.New("handlers: this replica is not the writer")

func okResponse(seq uint64, result any) []byte {
	var raw json.RawMessage
	switch r := result.(type) {
	case json.RawMessage:
		raw = r
	default:
		b, err := json.Marshal(r)
		if err != nil {
			return errResponse(&schemas.Error{Code: schemas.CodeInternal, Message: "internal error: reply could not be encoded"})
		}
		raw = b
	}
	return appendOK(make([]byte, 0, len(raw)+48), raw, seq)
}

// appendOK appends the reply {"ok":true,"result":raw,"seq":seq} as
// json.Marshal writes a schemas.Reply (result and seq left out when empty),
// without encoding/json's second pass over raw: raw is JSON this service
// encoded.
func appendOK(b []byte, raw json.RawMessage, seq uint64) []byte {
	b = append(b, `{"ok":true`...)
	if len(raw) > 0 {
		b = append(append(b, `,"result":`...), raw...)
	}
	if seq > 0 {
		b = strconv.AppendUint(append(b, `,"seq":`...), seq, 10)
	}
	return append(b, '}')
}

// pageResponse is the reply of a query: its encoded result, and next, the
// cursor of a list's next page ("" when none follows).
func pageResponse(seq uint64, result json.RawMessage, next string) []byte {
	b, _ := json.Marshal(schemas.Reply{OK: true, Result: result, Seq: seq, Next: next})
	return b
}

func errResponse(w *schemas.Error) []byte {
	b, _ := json.Marshal(schemas.Reply{OK: false, Error: w})
	return b
}

// bodyName names a command as sent: its name and the digest of its body's
// canonical JSON (the digest of the bytes when they do not canonicalize),
// so that the same command sent again is known whatever its key order or
// spacing, and another under the same id is not taken for it.
func bodyName(name string, body []byte) string {
	if c, err := schemas.CanonicalJSON(body); err == nil {
		body = c
	}
	sum := sha256.Sum256(body)
	return name + ":" + hex.EncodeToString(sum[:16])
}
