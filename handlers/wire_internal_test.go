package handlers

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// A query that reaches the views as the service stops is refused as
// unavailable (its caller retries), not reported as an internal error.
func TestAReadOfClosedViewsIsUnavailable(t *testing.T) {
	e := toWire(fmt.Errorf("list goals: %w", projections.ErrClosed), slog.New(slog.DiscardHandler))
	require.Equal(t, schemas.CodeUnavailable, e.Code)
	require.Contains(t, e.Message, "stopping")
}
