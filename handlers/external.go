package handlers

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/handlers/access"
)

// ErrUnreachable is what Connect, Serve and OpenMaintenance return
// (wrapped) when the existing NATS server or cluster cannot be connected
// to.
var ErrUnreachable = errors.New("handlers: NATS unreachable")

// ExternalNATS is an existing NATS server or cluster that the service (dwr
// serve --nats) or a maintenance command (dwr admin --nats) runs on, with
// how to authenticate to it; the flags --nats, --nats-creds, --nats-user,
// --nats-password and --nats-token set it.
type ExternalNATS struct {
	// URL is the server's, or the cluster's (comma-separated URLs); ""
	// for none: the embedded server.
	URL string
	// Creds is a NATS credentials file; User and Password, or Token, the
	// other ways in.
	Creds, User, Password, Token string
}

// hasAuth reports whether any way to authenticate is given.
func (x ExternalNATS) hasAuth() bool {
	return x.Creds != "" || x.User != "" || x.Password != "" || x.Token != ""
}

// validate refuses a way to authenticate without a server to use it on.
func (x ExternalNATS) validate() error {
	if x.URL == "" && x.hasAuth() {
		return classed{ErrInvalidConfig, errors.New("--nats-creds, --nats-user, --nats-password and --nats-token apply to --nats (an external server); " +
			"the embedded server takes dwr credentials (see dwr users add)")}
	}
	return nil
}

// Connect connects to x.URL as connection name, reconnecting forever: it
// pings every 2 s, and a connection with two pings unanswered is stale, so
// a frozen node is left for another node of the cluster within seconds
// (NATS's default is 2 minutes). extra options come last. It returns an
// error wrapping ErrInvalidConfig when x.Creds cannot be read, and one
// wrapping ErrUnreachable when the connection fails.
func (x ExternalNATS) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(2)}, extra...)
	if x.Creds != "" {
		creds, err := access.NATSCredentials(x.Creds)
		if err != nil {
			return nil, classed{ErrInvalidConfig, fmt.Errorf("--nats-creds: %v", err)}
		}
		opts = append(opts, creds)
	}
	if x.User != "" {
		opts = append(opts, nats.UserInfo(x.User, x.Password))
	}
	if x.Token != "" {
		opts = append(opts, nats.Token(x.Token))
	}
	nc, err := nats.Connect(x.URL, opts...)
	if err != nil {
		return nil, classed{ErrUnreachable, fmt.Errorf("cannot connect to NATS at %s: %v", x.URL, err)}
	}
	return nc, nil
}
