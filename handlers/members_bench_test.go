package handlers_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/dwr-run/dwr/domain"
	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/servicetest"
)

// BenchmarkMemberAdd measures a member.add on a closed service with conns
// admin connections open: the NATS server's reload of its users, which the
// command waits for, looks at every connection.
func BenchmarkMemberAdd(b *testing.B) {
	for _, conns := range []int{0, 1000} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) {
			st := servicetest.Start(b, "", servicetest.Options{Secure: true, Config: handlers.Config{WriterID: "bench"}})
			for range conns {
				st.AdminConn(b)
			}
			keys := make([]string, b.N)
			for i := range keys {
				kp, _ := nkeys.CreateUser()
				keys[i], _ = kp.PublicKey()
			}
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				servicetest.Must(b, st.Admin, "default", "member.add", domain.AddMember{Name: fmt.Sprintf("m%d", i), Role: domain.RoleViewer, PublicKey: keys[i]})
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N)/1000, "ms/add")
		})
	}
}
