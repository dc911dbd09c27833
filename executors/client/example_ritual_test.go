package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/dwr-run/dwr/executors/client"
	"github.com/dwr-run/dwr/handlers/servicetest"
	"github.com/dwr-run/dwr/schemas"
)

// A ritual is a goal and its plan defined once, with parameters, and run
// as often as needed: each run makes an ordinary goal that names the
// ritual's version.
func ExampleClient_RunRitual() {
	dev, err := servicetest.StartDev()
	must(err)
	defer func() { must(dev.Stop()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.New(dev.Conn)

	_, err = c.DefineRitual(ctx, schemas.DefineRitual{Name: "release", RitualTemplate: schemas.RitualTemplate{
		Parameters: json.RawMessage(`{"type": "object", "required": ["version"], "properties": {
			"version": {"type": "string"}, "attempts": {"type": "integer", "default": 2}}}`),
		Goal: json.RawMessage(`{"title": "Release ${version}"}`),
		Tasks: json.RawMessage(`[{"key": "compile", "queue": "build", "retry": {"max_attempts": "${attempts}"}},
			{"key": "package", "queue": "build", "depends_on": ["compile"], "input": {"name": "app-${version}.tar.gz"}}]`),
	}})
	must(err)
	run, err := c.RunRitual(ctx, schemas.RunRitual{Name: "release", Params: json.RawMessage(`{"version": "1.2"}`)})
	must(err)
	g, err := c.Goal(ctx, run.ID)
	must(err)
	pkg, err := c.Task(ctx, run.Tasks[1].TaskID)
	must(err)
	fmt.Printf("%s, from ritual %s version %d: package's input %s\n", g.Title, g.Ritual.Name, g.Ritual.Version, pkg.Spec.Input)
	// Output: Release 1.2, from ritual release version 1: package's input {"name":"app-1.2.tar.gz"}
}
