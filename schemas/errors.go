package schemas

import "time"

// The wire error codes: every code of common.json#/$defs/ErrorCode. A
// refusal's code says what a caller may do next; its message says it to a
// person.
const (
	// CodeInvalid: the request is malformed, too deeply nested, does not
	// match its schema, or asks for something the service refuses as it
	// stands (Fields names the offending fields). Fix it; do not retry it
	// as it is.
	CodeInvalid = "invalid"
	// CodeNotFound: what the request names does not exist (a task, a goal,
	// an approval; for this package, a schema).
	CodeNotFound = "not_found"
	// CodeConflict: the request does not fit the state it addresses (a
	// task that is not ready, an attempt that no longer holds its task). With
	// RetryAfter, it was refused only for being early.
	CodeConflict = "conflict"
	// CodeForbidden: the sender may not send it.
	CodeForbidden = "forbidden"
	// CodeTooLarge: the request, or its result, is larger than allowed.
	CodeTooLarge = "too_large"
	// CodeUnavailable: the outcome may be unknown; retry with the same
	// command id.
	CodeUnavailable = "unavailable"
	// CodeInternal: a bug; the service logged it (for this package: an
	// embedded schema is broken, which the tests catch).
	CodeInternal = "internal"
)

// Codes lists every wire error code, in the order of error.json.
var Codes = []string{CodeInvalid, CodeNotFound, CodeConflict, CodeForbidden, CodeTooLarge, CodeUnavailable, CodeInternal}

// Sentinel errors to branch on with errors.Is: every *Error matches the
// sentinel of its code.
var (
	ErrInvalid     = &Error{Code: CodeInvalid, Message: "invalid"}
	ErrNotFound    = &Error{Code: CodeNotFound, Message: "not found"}
	ErrConflict    = &Error{Code: CodeConflict, Message: "conflict"}
	ErrForbidden   = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrTooLarge    = &Error{Code: CodeTooLarge, Message: "too large"}
	ErrUnavailable = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrInternal    = &Error{Code: CodeInternal, Message: "internal"}
)

// FieldError is one offending field: its RFC 6901 JSON pointer in the
// message ("" for the whole message) and what is wrong with it.
type FieldError struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// Error is a refusal of a request: the "error" object of a reply
// (common.json#/$defs/WireError), as this package's validation returns it
// and as the service answers it.
type Error struct {
	Code    string       `json:"code"`
	Message string       `json:"message"`
	Fields  []FieldError `json:"fields,omitempty"`
	// RetryAfter, when set, is the moment from which the same request may
	// be taken: it was refused only for being early.
	RetryAfter *time.Time `json:"retry_after,omitempty"`

	// cause is the internal reason of a CodeInternal error: logged, never
	// sent.
	cause error
}

// Error returns the message prefixed with "schemas: ", and the internal
// cause, if any, for logs.
func (e *Error) Error() string {
	if e.cause != nil {
		return "schemas: " + e.Message + ": " + e.cause.Error()
	}
	return "schemas: " + e.Message
}

// Unwrap returns the internal cause of a CodeInternal error, or nil.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, ErrInvalid) matches every invalid message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}
