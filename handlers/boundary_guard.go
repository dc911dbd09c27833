package handlers

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/embedded"
)

// ClientLimits bound what the clients' account holds of the embedded NATS
// server. The server keeps each client connection (~40 KB) and each
// subscription (~0.7 KB) in memory with no bound of its own, and it runs in
// the service's process: one credential that subscribed without end (200,000
// subscriptions of its own inbox in 6 s took ~150 MB), or opened
// connections without end, took the service's memory with it. The first two
// are the account's limits, which the server enforces; the others are
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
	// MaxConnectionsPerWorkspace bounds the connections one workspace's
	// identities hold together: past it, its identities holding the most
	// are benched until it is under it again (an identity of several
	// workspaces counts in each). The account's MaxConnections is shared
	// by every workspace: a workspace's admin who made ten identities,
	// each under MaxConnectionsPerIdentity, took every connection, and no
	// other workspace's client could connect. Default half of
	// MaxConnections (none when it has none).
	MaxConnectionsPerWorkspace int
	// MaxSubscriptions bounds the account's subscriptions in all: past
	// it, the identity holding the most is benched. Default
	// DefaultMaxClientSubscriptions.
	MaxSubscriptions int
	// MaxPendingPerIdentity bounds the bytes the server holds for one
	// identity's connections, not yet written to them: a connection that
	// does not read makes them grow by what it is sent (up to max_pending,
	// 64 MiB, each, for the write deadline, 10 s, before the server cuts
	// it), so that an identity's connections subscribed to the feed and
	// not reading held a copy of every event each. An identity past it at
	// two looks in a row (an honest one that is a moment behind catches
	// up) is benched. Default DefaultMaxPendingPerIdentity.
	MaxPendingPerIdentity int64
	// MaxPending bounds the bytes the server holds for all the clients'
	// connections, not yet written to them: past it at two looks in a row,
	// the largest holders are benched by workspace (as for
	// MaxSubscriptions), so that many identities each under
	// MaxPendingPerIdentity do not take the service's memory either.
	// Default DefaultMaxClientPending.
	MaxPending int64
}

// The guard's bounds by default (ClientLimits).
const (
	DefaultMaxConnectionsPerIdentity = 1_000
	DefaultMaxClientSubscriptions    = 250_000
	DefaultMaxPendingPerIdentity     = 64 << 20
	DefaultMaxClientPending          = 256 << 20
)

// clientGuardEvery is how often the guard looks at what the clients hold,
// unless a look takes more than 1/clientGuardShare of that: it then waits
// clientGuardShare times its last look's time, so that it never takes more
// than that share of a core (listing 3,000 connections takes ~7 ms).
const (
	clientGuardEvery = 500 * time.Millisecond
	clientGuardShare = 20
)

func (l ClientLimits) withDefaults() ClientLimits {
	set := func(n *int, deflt int) {
		if *n == 0 {
			*n = deflt
		}
	}
	set(&l.MaxConnections, access.DefaultMaxClientConnections)
	set(&l.MaxSubscriptionsPerConnection, access.DefaultMaxSubscriptionsPerConnection)
	set(&l.MaxConnectionsPerIdentity, DefaultMaxConnectionsPerIdentity)
	if l.MaxConnections > 0 {
		set(&l.MaxConnectionsPerWorkspace, max(l.MaxConnections/2, 1))
	} else {
		set(&l.MaxConnectionsPerWorkspace, -1)
	}
	set(&l.MaxSubscriptions, DefaultMaxClientSubscriptions)
	l.MaxPendingPerIdentity = cmp.Or(l.MaxPendingPerIdentity, DefaultMaxPendingPerIdentity)
	l.MaxPending = cmp.Or(l.MaxPending, DefaultMaxClientPending)
	return l
}

// guardClients holds the clients to the limits' per-identity bounds until
// stop is closed.
func (b *Boundary) guardClients(stop <-chan struct{}) {
	t := time.NewTimer(clientGuardEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		began := time.Now()
		b.checkClients(began)
		t.Reset(max(clientGuardEvery, clientGuardShare*time.Since(began)))
	}
}

// checkClients benches each identity holding more connections than
// MaxConnectionsPerIdentity or more bytes pending than
// MaxPendingPerIdentity, and, while the account holds more subscriptions
// than MaxSubscriptions or more bytes pending than MaxPending, the
// largest holders (benchLargest).
func (b *Boundary) checkClients(now time.Time) {
	l := b.limits
	acc, err := b.srv.NATS().LookupAccount(access.ClientAccount)
	if err != nil {
		return
	}
	conns, subs := acc.NumLocalConnections(), acc.TotalSubs()
	overConns, overSubs := l.MaxConnectionsPerIdentity > 0 && conns > l.MaxConnectionsPerIdentity, l.MaxSubscriptions > 0 && subs > l.MaxSubscriptions
	crowded := l.MaxConnectionsPerWorkspace > 0 && conns > l.MaxConnectionsPerWorkspace
	if conns == 0 || (!overConns && !overSubs && !crowded && l.MaxPendingPerIdentity <= 0 && l.MaxPending <= 0) {
		b.behind, b.allBehind = nil, false
		return
	}
	holders := b.srv.Holdings(access.ClientAccount)
	maps.DeleteFunc(holders, func(user string, _ embedded.Holding) bool { return b.isBenched(user, now) })
	behind := map[string]bool{}
	var pending int64
	for user, h := range holders {
		over := l.MaxPendingPerIdentity > 0 && h.Pending > l.MaxPendingPerIdentity
		switch {
		case overConns && h.Connections > l.MaxConnectionsPerIdentity:
			b.benchHolder(user, now, "holding more connections than --max-connections-per-identity",
				"connections", h.Connections, "max", l.MaxConnectionsPerIdentity)
		case over && b.behind[user]:
			b.benchHolder(user, now, "not reading what its connections are sent: the server held more for them than --max-pending-per-identity",
				"pending_bytes", h.Pending, "connections", h.Connections, "max", l.MaxPendingPerIdentity)
		default:
			if over {
				behind[user] = true
			}
			pending += h.Pending
			continue
		}
		delete(holders, user) // benched: what it held goes with its connections
	}
	b.behind = behind
	if crowded {
		b.benchCrowds(holders, int64(l.MaxConnectionsPerWorkspace), now)
	}
	if overSubs {
		b.benchLargest(holders, func(h embedded.Holding) int64 { return int64(h.Subscriptions) }, int64(subs-l.MaxSubscriptions), now,
			"holding the most subscriptions of the workspace whose identities hold the most, while the clients hold more than --max-client-subscriptions",
			"all_subscriptions", subs, "max", l.MaxSubscriptions)
	}
	allBehind := l.MaxPending > 0 && pending > l.MaxPending
	if allBehind && b.allBehind {
		b.benchLargest(holders, func(h embedded.Holding) int64 { return h.Pending }, pending-l.MaxPending, now,
			"not reading what its connections are sent, of the workspace whose identities held the most, while the server held more for the clients than --max-client-pending",
			"all_pending_bytes", pending, "max", l.MaxPending)
		allBehind = false
	}
	b.allBehind = allBehind
}

// benchLargest benches the identity holding the most (by size) of the
// workspace whose identities hold the most, then the next so chosen, until
// what those benched held passes over, then removes them from holders.
// By workspace first, so that one workspace's admin who made many
// identities, each holding less than another workspace's honest largest
// holder, has its own identities benched; and as many as it takes in one
// look, not one a look. (An identity of no workspace, for a race with a
// change of members, counts as the workspace "".)
func (b *Boundary) benchLargest(holders map[string]embedded.Holding, size func(embedded.Holding) int64, over int64, now time.Time, why string, attrs ...any) {
	held, members, homesOf := b.byWorkspace(holders, size)
	for over > 0 && len(held) > 0 {
		ws := ""
		first := true
		for w, n := range held {
			if first || n > held[ws] || (n == held[ws] && w < ws) {
				ws, first = w, false
			}
		}
		users := members[ws]
		for len(users) > 0 {
			if _, ok := holders[users[0]]; ok {
				break
			}
			users = users[1:] // benched already, for another of its workspaces
		}
		if members[ws] = users; len(users) == 0 {
			delete(held, ws)
			continue
		}
		user := users[0]
		n := size(holders[user])
		b.benchHolder(user, now, why, append([]any{"held", n, "workspace", ws}, attrs...)...)
		for _, w := range homesOf(user) {
			held[w] -= n
		}
		delete(holders, user)
		over -= n
	}
}

// byWorkspace sums what holders hold by size for each workspace (an
// identity of no workspace, for a race with a change of members, counts as
// the workspace ""), with each workspace's identities, the largest first,
// and the workspaces of an identity.
func (b *Boundary) byWorkspace(holders map[string]embedded.Holding, size func(embedded.Holding) int64) (held map[string]int64, members map[string][]string, homesOf func(user string) []string) {
	homes := *b.homes.Load()
	homesOf = func(user string) []string {
		if h := homes[user]; len(h) > 0 {
			return h
		}
		return []string{""}
	}
	held = map[string]int64{}       // workspace → what its identities hold
	members = map[string][]string{} // workspace → its identities, the largest first
	for user, h := range holders {
		for _, ws := range homesOf(user) {
			held[ws] += size(h)
			members[ws] = append(members[ws], user)
		}
	}
	for _, users := range members {
		slices.SortFunc(users, func(x, y string) int { return cmp.Compare(size(holders[y]), size(holders[x])) })
	}
	return held, members, homesOf
}

// benchCrowds benches, of each workspace whose identities hold more than
// bound connections together, the identities holding the most until it
// holds no more, and removes them from holders. The identities of every
// workspace (access.AllWorkspaces: the service's admins) are not counted.
func (b *Boundary) benchCrowds(holders map[string]embedded.Holding, bound int64, now time.Time) {
	conns := func(h embedded.Holding) int64 { return int64(h.Connections) }
	held, members, homesOf := b.byWorkspace(holders, conns)
	for ws, n := range held {
		if ws == access.AllWorkspaces {
			continue
		}
		for _, user := range members[ws] {
			if n <= bound {
				break
			}
			h, ok := holders[user]
			if !ok {
				continue // benched already, for another of its workspaces
			}
			b.benchHolder(user, now, "holding the most connections of a workspace whose identities hold more than --max-connections-per-workspace",
				"connections", h.Connections, "workspace", ws, "workspace_connections", n, "max", bound)
			for _, w := range homesOf(user) {
				held[w] -= conns(h)
			}
			n -= conns(h)
			delete(holders, user)
		}
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
