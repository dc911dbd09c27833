package eventstore_test

import (
	"bytes"
	"testing"

	"go.uber.org/goleak"

	"github.com/dwr-run/dwr/eventstore"
)

// testKey authenticates the records the tests write.
var testKey = mustKey(bytes.Repeat([]byte{7}, eventstore.LogKeySize))

func mustKey(secret []byte) *eventstore.LogKey {
	k, err := eventstore.NewLogKey(secret)
	if err != nil {
		panic(err)
	}
	return k
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
