package handlers

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/access"
)

// No member may take a name the service acts under: a command's actor is
// recorded by name, and a member so named would read as the service.
func TestTheServicesActorsAreReservedNames(t *testing.T) {
	for _, name := range []string{actorService, actorTimer, actorQuarantine, actorRetention, access.AdminName, access.AnonymousUser} {
		require.True(t, domain.ReservedName(name), "%q", name)
	}
}
