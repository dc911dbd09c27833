package client

import (
	"fmt"
	"time"

	"github.com/dwr-run/dwr/schemas"
)

// Errors to branch on with errors.Is. A refused request returns the
// service's *schemas.Error, which matches the sentinel of its code; a
// request that did not reach the service returns a *RequestError, which
// matches ErrUnavailable (or ErrForbidden) as well as its NATS cause.
var (
	// ErrInvalid: the request is malformed or breaks a rule of its
	// command; the error's Fields name the offending fields.
	ErrInvalid = schemas.ErrInvalid
	// ErrNotFound: the workspace, goal, task or approval does not exist.
	ErrNotFound = schemas.ErrNotFound
	// ErrConflict: the request does not fit the current state (a task
	// already ended, a version that moved on, a command id used for other
	// content).
	ErrConflict = schemas.ErrConflict
	// ErrTooLarge: the request, or its reply, is larger than allowed.
	ErrTooLarge = schemas.ErrTooLarge
	// ErrForbidden: the caller's identity may not send this request.
	ErrForbidden = schemas.ErrForbidden
	// ErrUnavailable: the service could not take the request now (no
	// writer, no responder, a timeout); the same request, with the same
	// command id, may be sent again. A Client retries these itself unless
	// NoRetry is set.
	ErrUnavailable = schemas.ErrUnavailable
	// ErrInternal: the service failed; it logged why.
	ErrInternal = schemas.ErrInternal
)

// RequestError is a request that did not get a dwr reply: no service
// answered, none answered in time, the NATS server refused it, or the
// answer was not a dwr reply.
type RequestError struct {
	// Subject is the request's subject.
	Subject string
	// Code is the wire code the failure counts as: unavailable (try
	// again), forbidden (the identity may not publish there), or "" (the
	// request cannot succeed as sent: the connection is closed, the
	// message is larger than the server allows).
	Code string
	// Timeout, for a request that was not answered in time, is how long it
	// waited.
	Timeout time.Duration
	// Err is the cause, a NATS error where there is one.
	Err error
}

func (e *RequestError) Error() string {
	switch {
	case e.Timeout > 0:
		return fmt.Sprintf("client: %s: not answered within %s", e.Subject, e.Timeout)
	default:
		return fmt.Sprintf("client: %s: %v", e.Subject, e.Err)
	}
}

// Unwrap returns the cause.
func (e *RequestError) Unwrap() error { return e.Err }

// Is reports whether target is the *schemas.Error sentinel of e's code.
func (e *RequestError) Is(target error) bool {
	t, ok := target.(*schemas.Error)
	return ok && e.Code != "" && t.Code == e.Code
}

// The options an OptionError names.
const (
	OptionCredentials = "Credentials"
	OptionTLS         = "TLS"
)

// OptionError is an option of Connect that cannot be used: a credential
// file, or a TLS file, that cannot be read or does not hold what it must.
// Connect returns it before dialling.
type OptionError struct {
	// Option is OptionCredentials or OptionTLS.
	Option string
	// File is the file that cannot be used (for a client certificate, the
	// certificate's).
	File string
	// Err says what is wrong with it.
	Err error
}

func (e *OptionError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *OptionError) Unwrap() error { return e.Err }
