package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/schemas"
)

// credsFile returns the credential a client command connects with: --creds,
// else DWR_CREDS, else the admin credential of the local data directory
// ($DWR_DATA or ./dwr-data) when it exists, else none.
func (g *globals) credsFile() string {
	if g.creds != "" {
		return g.creds
	}
	p := filepath.Join(envOr("DWR_DATA", "dwr-data"), access.AdminCredsFile)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// connect returns a client of the service for one command: it tries each
// request once and waits --timeout for it, and its connection does not
// reconnect.
func (g *globals) connect() (*client.Client, error) {
	d, err := time.ParseDuration(g.timeout)
	if err != nil {
		return nil, fail(exitInvalid, "--timeout %q: %v", g.timeout, err)
	}
	return g.open("dwr-cli", client.NATSOptions(nats.Timeout(d), nats.NoReconnect()), client.NoRetry(), client.Timeout(d))
}

// follow returns a client for a command that follows the service for long
// (dwr watch): its connection reconnects for as long as it runs (a first
// connection that fails is an error all the same); each request waits
// --timeout.
func (g *globals) follow() (*client.Client, error) {
	d, err := time.ParseDuration(g.timeout)
	if err != nil {
		return nil, fail(exitInvalid, "--timeout %q: %v", g.timeout, err)
	}
	return g.open("dwr-watch", client.NATSOptions(nats.Timeout(d), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond)),
		client.NoRetry(), client.Timeout(d))
}

// open connects to --server as connection name, with the credential and TLS
// flags, in --workspace, then opts; its errors say what to do.
func (g *globals) open(name string, opts ...client.Option) (*client.Client, error) {
	creds := g.credsFile()
	cl, err := client.Connect(g.server, append([]client.Option{client.Name(name), client.Credentials(creds),
		client.TLS(g.tlsCA, g.tlsCert, g.tlsKey), client.Workspace(g.workspace)}, opts...)...)
	var oe *client.OptionError
	switch {
	case err == nil:
		return cl, nil
	case errors.As(err, &oe):
		flag := "--creds"
		switch {
		case oe.Option == client.OptionTLS && oe.File == g.tlsCA:
			flag = "--tls-ca"
		case oe.Option == client.OptionTLS:
			flag = "--tls-cert/--tls-key"
		}
		return nil, fail(exitInvalid, "%s: %v", flag, err)
	case errors.Is(err, nats.ErrAuthorization) && creds == "":
		return nil, fail(exitConflict, "NATS at %s wants a credential and none was found: give --creds FILE (or DWR_CREDS); on the server's machine, dwr-data/admin.creds is the admin's", g.server)
	case errors.Is(err, nats.ErrAuthorization):
		return nil, fail(exitConflict, "NATS at %s refused the credential %q: %v\nuse a credential of this server (dwr-data/admin.creds on its machine, or one from `dwr users add`) with --creds or DWR_CREDS", g.server, creds, cause(err))
	}
	return nil, fail(exitUnavailable, "cannot reach NATS at %s: %v\nstart the service with `dwr serve`, or point --server (DWR_SERVER) at it", g.server, cause(err))
}

// cause returns the error that err wraps (NATS's, under the client's
// prefix), or err.
func cause(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// withClient connects to the service, runs f with the client, closes it,
// and returns f's error as the CLI says it (clientError).
func (g *globals) withClient(f func(context.Context, *client.Client) error) error {
	cl, err := g.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := g.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return g.clientError(f(ctx, cl))
}

// clientError returns an error of the client with the exit code and the
// message the CLI gives it: a refusal with the code of its wire code and
// every field it names; a request that got no answer with what to do about
// it. Other errors are returned as they are.
func (g *globals) clientError(err error) error {
	var ce *cliError
	var se *schemas.Error
	var re *client.RequestError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil || errors.As(err, &ce):
		return err
	case errors.As(err, &se):
		return refusal(se)
	case !errors.As(err, &re):
		return err
	case re.Code == schemas.CodeForbidden:
		return fail(exitConflict, "forbidden: %v\nyour credential (%s) does not allow %s: ask an admin for a role that does (dwr users add)", re.Err, dash(g.credsFile()), re.Subject)
	case errors.Is(re, nats.ErrNoResponders):
		return fail(exitUnavailable, "no dwr service answers on %s (subject %s): start it with `dwr serve`", g.server, re.Subject)
	case re.Timeout > 0:
		return fail(exitUnavailable, "the dwr service did not answer within %s: it may be overloaded or restarting; retry (with the same --command-id)", re.Timeout)
	case errors.As(re, &syntax) || errors.As(re, &typ):
		return fail(exitError, "the service answered something that is not a dwr reply: %v", cause(re.Err))
	}
	return fail(exitUnavailable, "request failed: %v", re.Err)
}

// refusal returns the service's refusal e with the exit code of its wire
// code, and the fields its message does not name already.
func refusal(e *schemas.Error) error {
	code := exitError
	switch e.Code {
	case schemas.CodeInvalid, schemas.CodeTooLarge:
		code = exitInvalid
	case schemas.CodeNotFound:
		code = exitNotFound
	case schemas.CodeConflict, schemas.CodeForbidden:
		code = exitConflict
	case schemas.CodeUnavailable:
		code = exitUnavailable
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Code, e.Message)
	for _, f := range e.Fields {
		if !strings.Contains(e.Message, f.Pointer) && !strings.Contains(e.Message, f.Message) {
			fmt.Fprintf(&b, "\n  field %s: %s", f.Pointer, f.Message)
		}
	}
	return fail(code, "%s", b.String())
}

// serveError returns Serve's error with its exit code: a damaged log's
// says what to do about it.
func serveError(err error) error {
	if errors.Is(err, eventstore.ErrIntegrity) && !errors.Is(err, handlers.ErrInvalidConfig) {
		return fail(exitDamaged, "%v\nnothing is served from a log that fails verification: restore the log (or its stream's configuration) "+
			"from a replica or a backup, or accept its verified prefix with --accept-verified-prefix (the commands after it are lost); "+
			"`dwr admin verify` shows the damage", err)
	}
	return handlersError(err)
}

// handlersError returns an error of handlers with the exit code of its
// class: bad input, NATS out of reach, or another failure.
func handlersError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, handlers.ErrInvalidConfig) || errors.Is(err, handlers.ErrNoLog):
		return fail(exitInvalid, "%v", err)
	case errors.Is(err, handlers.ErrUnreachable):
		return fail(exitUnavailable, "%v", err)
	}
	return fail(exitError, "%v", err)
}
