package console_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests leave no goroutine behind: sessions,
// sign-ins, streams and the browser all end. A connection net/http closes
// after a body past its bound lingers a moment (closeWriteAndWait).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}
