package handlers_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers/access"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// Members come and go while executors work: an executor's calls to its
// queue's consumer (through the client account's JetStream imports) are
// answered all along. (While the server reloaded its users for each
// change, about half of such calls found no responders.)
func TestMemberChangesDoNotInterruptTheWorkers(t *testing.T) {
	st := servicetest.Start(t, "", servicetest.Options{Secure: true})
	servicetest.Must(t, st.Admin, "default", "queue.configure", map[string]any{"queue": "q", "lease_ms": 30_000, "max_deliver": 5})
	exec := st.Member(t, "default", "worker", domain.RoleExecutor, "q")
	js, err := jetstream.NewWithAPIPrefix(exec, access.JSAPIPrefix)
	require.NoError(t, err)
	ctx := t.Context()

	stop := make(chan struct{})
	var (
		wg              sync.WaitGroup
		lookups, failed int
		first           error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := js.Consumer(ctx, "DWR_WORK", access.Consumer("dwr", "default", "q"))
			lookups++
			if err != nil {
				if failed == 0 {
					first = err
				}
				failed++
			}
		}
	}()
	for i := range 30 {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, _ := kp.PublicKey()
		servicetest.Must(t, st.Admin, "default", "member.add", domain.AddMember{Name: fmt.Sprintf("viewer%d", i), Role: domain.RoleViewer, PublicKey: pub})
	}
	close(stop)
	wg.Wait()
	require.NotZero(t, lookups)
	require.Zero(t, failed, "of %d lookups of its consumer; the first: %v", lookups, first)
}
