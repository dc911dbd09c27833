package handlers

import (
	"cmp"
	"slices"
	"time"

	"github.com/dwr-run/dwr/handlers/access"
)

// ClientLimits bound what the clients' account holds of the embedded NATS
// server. The server keeps each client connection (~40 KB) and each
// subscription (~0.7 KB) in memory with no bound of its own, and it runs in
// the service's process: one credential that subscribed without end (200,000
// subscriptions of its own inbox in 6 s took ~150 MB), or opened
// connections without end, took the service's memory with it. The first two
// are the account's limits, which the server enforces; the last two are
// held by the boundary's guard, which looks every clientGuardEvery and
// benches (BenchFor: closes its connections and refuses it meanwhile) an
// identity past them. For each, 0 is its default and a negative value
// none.
type ClientLimits struct {
	// MaxConnections bounds the account's connections at once: the server
	// refuses a connection past it. Default
	// access.DefaultMaxClientConnections (10,000).
	MaxConnections int
	// MaxSubscriptionsPerConnection bounds each connection's
	// subscriptions: the server refuses a subscription past it. Default
	// access.DefaultMaxSubscriptionsPerConnection (10,000).
	MaxSubscriptionsPerConnection int
	// MaxConnectionsPerIdentity bounds one identity's connections at
	// once (a fleet of workers sharing a credential holds one each):
	// past it, the identity is benched. Default
	// DefaultMaxConnectionsPerIdentity.
	MaxConnectionsPerIdentity int
	// MaxSubscriptions bounds the account's subscriptions in all: past
	// it, the identity holding the most is benched. Default
	// DefaultMaxClientSubscriptions.
	MaxSubscriptions int
}

// The guard's bounds by default (ClientLimits).
const (
	DefaultMaxConnectionsPerIdentity = 1_000
	DefaultMaxClientSubscriptions    = 250_000
)

// clientGuardEvery is how often the guard looks at what the clients hold.
const clientGuardEvery = time.Second

func (l ClientLimits) withDefaults() ClientLimits {
	set := func(n *int, deflt int) {
		if *n == 0 {
			*n = deflt
		}
	}
	set(&l.MaxConnections, access.DefaultMaxClientConnections)
	set(&l.MaxSubscriptionsPerConnection, access.DefaultMaxSubscriptionsPerConnection)
	set(&l.MaxConnectionsPerIdentity, DefaultMaxConnectionsPerIdentity)
	set(&l.MaxSubscriptions, DefaultMaxClientSubscriptions)
	return l
}

// guardClients holds the clients to the limits' per-identity bounds until
// stop is closed.
func (b *Boundary) guardClients(stop <-chan struct{}) {
	t := time.NewTicker(clientGuardEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		b.checkClients(time.Now())
	}
}

// checkClients benches each identity holding more connections than
// MaxConnectionsPerIdentity, and, while the account holds more
// subscriptions than MaxSubscriptions, the identity holding the most. It
// lists the connections only when the account's counts could be past a
// bound.
func (b *Boundary) checkClients(now time.Time) {
	perIdentity, all := b.limits.MaxConnectionsPerIdentity, b.limits.MaxSubscriptions
	acc, err := b.srv.NATS().LookupAccount(access.ClientAccount)
	if err != nil {
		return
	}
	conns, subs := acc.NumLocalConnections(), acc.TotalSubs()

	overConns, overSubs := perIdentity > 0 && conns > perIdentity, all > 0 && subs > all
	if !overConns && !overSubs {
		return
	}
	type holder struct {
		user        string
		conns, subs int
	}
	var holders []holder
	for user, h := range b.srv.Holdings(access.ClientAccount) {
		if !b.isBenched(user, now) {
			holders = append(holders, holder{user, h.Connections, h.Subscriptions})
		}
	}
	if overConns {
		for _, h := range holders {
			if h.conns > perIdentity {
				b.benchHolder(h.user, now, "holding more connections than --max-connections-per-identity",
					"connections", h.conns, "max", perIdentity)
			}
		}
	}
	if overSubs && len(holders) > 0 {
		most := slices.MaxFunc(holders, func(a, b holder) int { return cmp.Compare(a.subs, b.subs) })
		b.benchHolder(most.user, now, "holding the most subscriptions while the clients hold more than --max-client-subscriptions",
			"subscriptions", most.subs, "all_subscriptions", subs, "max", all)
	}
}

// benchHolder benches user for why, or warns — at most once a minute —
// when it cannot: the anonymous user of an open server is everyone.
func (b *Boundary) benchHolder(user string, now time.Time, why string, attrs ...any) {
	if user == access.AnonymousUser || b.benchFor < 0 {
		if now.Sub(b.warned) >= time.Minute {
			b.warned = now
			b.logger.Warn("dwr: a client identity is past the embedded server's limits and is not benched (the anonymous user of an open "+
				"server, or --bench-flooders=-1s): "+why, append([]any{"user", user}, attrs...)...)
		}
		return
	}
	b.bench(user, b.benchFor, why, attrs...)
}
