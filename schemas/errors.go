package schemas

import "time"

// The wire error codes this package returns; error.json lists every code of
// the contract.
const (
	// CodeInvalid: the message is malformed, too deeply nested, or does not
	// match its schema.
	CodeInvalid = "invalid"
	// CodeNotFound: no schema has the command name or event type asked for.
	CodeNotFound = "not_found"
	// CodeTooLarge: the message is larger than allowed.
	CodeTooLarge = "too_large"
	// CodeInternal: an embedded schema is broken (a bug caught by the tests).
	CodeInternal = "internal"
)

// Sentinel errors to branch on with errors.Is: every *Error matches the
// sentinel of its code.
var (
	ErrInvalid  = &Error{Code: CodeInvalid, Message: "invalid"}
	ErrNotFound = &Error{Code: CodeNotFound, Message: "not found"}
	ErrTooLarge = &Error{Code: CodeTooLarge, Message: "too large"}
	ErrInternal = &Error{Code: CodeInternal, Message: "internal"}
)

// FieldError is one offending field: its RFC 6901 JSON pointer in the
// message ("" for the whole message) and what is wrong with it.
type FieldError struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// Error is a refusal of a message. It encodes as the "error" object of
// error.json.
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
