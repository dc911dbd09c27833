package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// Headers a client may set on a command or query.
const (
	HeaderCommandID     = "Dwr-Command-Id"
	HeaderCorrelationID = "Dwr-Correlation-Id"
	HeaderMinSeq        = "Dwr-Min-Seq"
)

// FieldError names one offending field by its JSON pointer.
type FieldError struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// WireError is the error object of a failed reply.
type WireError struct {
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Fields  []FieldError `json:"fields,omitempty"`
	// RetryAfter, when set, is when the same request may be taken: it was
	// refused only for being early.
	RetryAfter *time.Time `json:"retry_after,omitempty"`
}

func (e *WireError) Error() string { return e.Code + ": " + e.Message }

// Response is every reply of a command or query endpoint.
type Response struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Seq    uint64          `json:"seq,omitempty"`
	// Next, in the reply of a list query, says that more items follow: the
	// same query with after set to it continues the listing. Absent on the
	// last page.
	Next  string     `json:"next,omitempty"`
	Error *WireError `json:"error,omitempty"`
}

// toWire translates any error into its wire form: the one table that maps
// the service's errors to stable codes. Internal errors are logged, never
// shown.
func toWire(err error, logger *slog.Logger) *WireError {
	var de *domain.Error
	var se *schemas.Error
	var we *WireError
	switch {
	case errors.As(err, &we):
		return we
	case errors.As(err, &de):
		w := &WireError{Code: string(de.Code), Message: de.Message}
		if de.Field != "" {
			w.Fields = []FieldError{{Pointer: de.Field, Message: de.Message}}
			w.Message = de.Field + ": " + de.Message
		}
		if !de.RetryAfter.IsZero() {
			at := de.RetryAfter.UTC()
			w.RetryAfter = &at
		}
		return w
	case errors.As(err, &se):
		w := &WireError{Code: se.Code, Message: se.Message}
		for _, f := range se.Fields {
			w.Fields = append(w.Fields, FieldError{Pointer: f.Pointer, Message: f.Message})
		}
		return w
	case errors.Is(err, projections.ErrCursor):
		return &WireError{Code: string(domain.CodeInvalid), Message: "after is not a cursor of this listing: pass the next that a reply to the same query gave",
			Fields: []FieldError{{Pointer: "/after", Message: "not a cursor of this listing"}}}
	case errors.Is(err, eventstore.ErrTooLarge):
		return &WireError{Code: string(domain.CodeTooLarge), Message: "the command's events do not fit in one log record; split the command (for example a smaller plan)"}
	case errors.Is(err, eventstore.ErrUnknownOutcome):
		return &WireError{Code: string(domain.CodeUnavailable), Message: "the outcome is unknown (the writer lost the log mid-append): retry with the same command id to learn it"}
	case errors.Is(err, eventstore.ErrFenced), errors.Is(err, eventstore.ErrStopped), errors.Is(err, errNotWriter):
		return &WireError{Code: string(domain.CodeUnavailable), Message: "no writer is available right now: retry with the same command id"}
	case errors.Is(err, context.DeadlineExceeded):
		return &WireError{Code: string(domain.CodeUnavailable), Message: "timed out: retry with the same command id"}
	}
	logger.Error("handlers: internal error", "err", err)
	return &WireError{Code: string(domain.CodeInternal), Message: "internal error: the service logged it; retry, and report it if it persists"}
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
			return errResponse(&WireError{Code: string(domain.CodeInternal), Message: "internal error: reply could not be encoded"})
		}
		raw = b
	}
	b, _ := json.Marshal(Response{OK: true, Result: raw, Seq: seq})
	return b
}

// pageResponse is the reply of a query: its encoded result, and next, the
// cursor of a list's next page ("" when none follows).
func pageResponse(seq uint64, result json.RawMessage, next string) []byte {
	b, _ := json.Marshal(Response{OK: true, Result: result, Seq: seq, Next: next})
	return b
}

func errResponse(w *WireError) []byte {
	b, _ := json.Marshal(Response{OK: false, Error: w})
	return b
}
