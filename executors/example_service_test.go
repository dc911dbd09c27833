package executors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/handlers"
	"github.com/dwr-run/dwr/handlers/embedded"
	"github.com/dwr-run/dwr/projections"
	"github.com/dwr-run/dwr/schemas"
)

// devService is the dwr service in-process, as `dwr serve` runs it, for the
// examples. Its methods panic on errors: an example has no *testing.T.
type devService struct {
	srv  *embedded.Server
	nc   *nats.Conn
	stop func()
}

func startDevService() *devService {
	dir, err := os.MkdirTemp("", "dwr-example-")
	must(err)
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Logger: serviceLogger()})
	must(err)
	nc, err := srv.Connect()
	must(err)
	store, err := projections.Open(filepath.Join(dir, "views"), projections.Options{})
	must(err)
	key, _, err := handlers.LoadLogKey(filepath.Join(dir, handlers.LogKeyFile), true)
	must(err)
	svc, err := handlers.New(nc, store, handlers.Config{Logger: serviceLogger(), LogKey: key})
	must(err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	<-svc.Ready()
	return &devService{srv: srv, nc: nc, stop: func() {
		cancel()
		must(<-done)
		nc.Close()
		must(store.Close())
		srv.Shutdown()
		must(os.RemoveAll(dir))
	}}
}

// connect returns a new client connection, as an executor process has.
func (s *devService) connect() *nats.Conn {
	nc, err := s.srv.Connect()
	must(err)
	return nc
}

// createTask creates a standalone task and returns its id.
func (s *devService) createTask(spec map[string]any) string {
	var rep struct{ ID string }
	must(json.Unmarshal(s.call("dwr.cmd.default.task.create", map[string]any{"spec": spec}), &rep))
	return rep.ID
}

// waitState waits up to 20s for the task to be in state.
func (s *devService) waitState(id, state string) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		var t struct{ State string }
		must(json.Unmarshal(s.call("dwr.q.default.task.get", schemas.Query{ID: id}), &t))
		if t.State == state {
			return
		}
		tick := time.NewTimer(20 * time.Millisecond)
		<-tick.C
	}
	panic(fmt.Sprintf("task %s never became %s", id, state))
}

func (s *devService) call(subject string, body any) json.RawMessage {
	data, err := json.Marshal(body)
	must(err)
	resp, err := s.nc.Request(subject, data, 10*time.Second)
	must(err)
	var r schemas.Reply
	must(json.Unmarshal(resp.Data, &r))
	if !r.OK {
		panic(fmt.Sprintf("%s: %+v", subject, r.Error))
	}
	return r.Result
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
