package executors_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// devService is the dwr service in-process, as `dwr serve` runs it
// (servicetest.StartDev), with a caller's client of it, for the examples.
// Its methods panic on errors: an example has no *testing.T.
type devService struct {
	*servicetest.Dev
	c *client.Client
}

func startDevService() *devService {
	d, err := servicetest.StartDev()
	must(err)
	return &devService{Dev: d, c: client.New(d.Conn)}
}

func (s *devService) stop() { must(s.Stop()) }

// connect returns a new client connection, as an executor process has.
func (s *devService) connect() *nats.Conn {
	nc, err := s.Connect()
	must(err)
	return nc
}

// createTask creates a standalone task and returns its id.
func (s *devService) createTask(spec schemas.TaskSpec) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := s.c.CreateTask(ctx, spec)
	must(err)
	return r.ID
}

// waitState waits up to 20s for the task to be in state.
func (s *devService) waitState(id, state string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !servicetest.Within(20*time.Second, func() bool {
		t, err := s.c.Task(ctx, id)
		must(err)
		return t.State == state
	}) {
		panic(fmt.Sprintf("task %s never became %s", id, state))
	}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
