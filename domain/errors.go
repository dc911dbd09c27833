package domain

import (
	"errors"
	"fmt"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Code classifies an error for callers and for the wire. The values are part
// of the wire contract and never change.
type Code string

// The stable error codes: the wire's (schemas.Codes).
const (
	CodeInvalid     Code = schemas.CodeInvalid
	CodeNotFound    Code = schemas.CodeNotFound
	CodeConflict    Code = schemas.CodeConflict
	CodeForbidden   Code = schemas.CodeForbidden
	CodeTooLarge    Code = schemas.CodeTooLarge
	CodeUnavailable Code = schemas.CodeUnavailable
	CodeInternal    Code = schemas.CodeInternal
)

// Sentinel errors to branch on with errors.Is; every *Error matches the
// sentinel of its code.
var (
	ErrInvalid   = &Error{Code: CodeInvalid, Message: "invalid"}
	ErrNotFound  = &Error{Code: CodeNotFound, Message: "not found"}
	ErrConflict  = &Error{Code: CodeConflict, Message: "conflict"}
	ErrForbidden = &Error{Code: CodeForbidden, Message: "forbidden"}
)

// Error is a refusal of a command: a code, a message a person can act on, and
// the JSON pointer of the offending field when there is one.
type Error struct {
	Code    Code
	Field   string // JSON pointer into the command, e.g. "/tasks/2/depends_on/0"
	Message string
	// RetryAfter, when set, is the moment from which the same command may
	// be taken: it was refused only for being early.
	RetryAfter time.Time
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("domain: %s: %s (field %s)", e.Code, e.Message, e.Field)
	}
	return fmt.Sprintf("domain: %s: %s", e.Code, e.Message)
}

// Is reports whether target is an *Error with the same code; sentinels carry
// only a code, so errors.Is(err, ErrConflict) matches every conflict.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && (t.Field == "" || t.Field == e.Field)
}

func invalid(field, format string, args ...any) error {
	return &Error{Code: CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

func notFound(field, format string, args ...any) error {
	return &Error{Code: CodeNotFound, Field: field, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &Error{Code: CodeConflict, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of err: the code of an *Error in its chain, or
// CodeInternal for anything else.
func CodeOf(err error) Code {
	var de *Error
	if errors.As(err, &de) {
		return de.Code
	}
	return CodeInternal
}
