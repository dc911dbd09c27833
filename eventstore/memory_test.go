package eventstore_test

import (
	"testing"

	"github.com/dwr-run/dwr/eventstore"
	"github.com/dwr-run/dwr/eventstore/logtest"
)

func TestMemoryLog(t *testing.T) {
	logtest.Run(t, func(*testing.T) eventstore.Log { return eventstore.NewMemoryLog() })
}
