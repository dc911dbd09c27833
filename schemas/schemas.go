package schemas

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

//go:embed common.json envelope.json reply.json error.json work_item.json query.json commands/*.json events/*.json
var files embed.FS

// baseURL is the prefix of every schema's $id; a schema's path follows it.
const baseURL = "https://dwr.run/schemas/"

// The paths of the schemas that are not per command or per event.
const (
	PathCommon   = "common.json"
	PathEnvelope = "envelope.json"
	PathReply    = "reply.json"
	PathError    = "error.json"
	PathWorkItem = "work_item.json"
	PathQuery    = "query.json"
)

// CommandPath returns the path of the schema of the command named name,
// such as "commands/task.create.json".
func CommandPath(name string) string { return "commands/" + name + ".json" }

// EventPath returns the path of the schema of the data of an event of type
// eventType, such as "events/task.created.json".
func EventPath(eventType string) string { return "events/" + eventType + ".json" }

// registry is every embedded schema, read and compiled once.
type registry struct {
	raw      map[string][]byte             // path -> file
	docs     map[string]any                // path -> decoded file, to look up properties
	compiled map[string]*jsonschema.Schema // path -> schema
	commands []string                      // sorted
	events   []string                      // sorted
	err      error                         // a broken embedded schema
}

var (
	regOnce sync.Once
	reg     *registry
)

// Compile compiles the embedded schemas now, as the first validation would
// otherwise, and returns what makes them unusable (nil when they compile):
// a service calls it while it starts, so that its first command does not
// wait for the compilation.
func Compile() error {
	if r := load(); r.err != nil {
		return r.internal()
	}
	return nil
}

// load returns the registry, reading and compiling it on first use.
func load() *registry {
	regOnce.Do(func() { reg = compileAll(files) })
	return reg
}

// compileAll reads and compiles every schema of fsys. It never panics: a
// broken schema is reported in the registry's err (and the tests fail on it).
func compileAll(fsys fs.FS) (r *registry) {
	r = &registry{raw: map[string][]byte{}, docs: map[string]any{}, compiled: map[string]*jsonschema.Schema{}}
	defer func() {
		if p := recover(); p != nil {
			r.err = fmt.Errorf("compiling the embedded schemas panicked: %v", p)
		}
	}()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".json" {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		r.raw[p] = b
		switch dir, file := path.Split(p); dir {
		case "commands/":
			r.commands = append(r.commands, strings.TrimSuffix(file, ".json"))
		case "events/":
			r.events = append(r.events, strings.TrimSuffix(file, ".json"))
		}
		return nil
	})
	if err != nil {
		r.err = fmt.Errorf("reading the embedded schemas: %w", err)
		return r
	}
	slices.Sort(r.commands)
	slices.Sort(r.events)

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(compilePattern)
	for _, p := range slices.Sorted(maps.Keys(r.raw)) {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.raw[p]))
		if err != nil {
			r.err = fmt.Errorf("schema %s is not JSON: %w", p, err)
			return r
		}
		r.docs[p] = doc
		if err := c.AddResource(baseURL+p, doc); err != nil {
			r.err = fmt.Errorf("schema %s: %w", p, err)
			return r
		}
	}
	for _, p := range slices.Sorted(maps.Keys(r.raw)) {
		s, err := c.Compile(baseURL + p)
		if err != nil {
			r.err = fmt.Errorf("schema %s does not compile: %w", p, err)
			return r
		}
		r.compiled[p] = s
	}
	return r
}

// noLoader refuses to fetch anything: every schema a schema refers to must be
// embedded.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is not embedded", url)
}

// CommandNames returns the name of every command that has a schema, sorted.
func CommandNames() []string { return slices.Clone(load().commands) }

// EventTypes returns every event type that has a schema, sorted.
func EventTypes() []string { return slices.Clone(load().events) }

// Schema returns a copy of the schema file at path (such as
// "commands/task.create.json" or "envelope.json"), or false when there is
// none.
func Schema(path string) ([]byte, bool) {
	b, ok := load().raw[path]
	if !ok {
		return nil, false
	}
	return slices.Clone(b), true
}

// All returns a copy of every schema file by its path, to publish the
// contract (dwr schema prints them). The $ref between them are relative to
// these paths.
func All() map[string][]byte {
	raw := load().raw
	out := make(map[string][]byte, len(raw))
	for p, b := range raw {
		out[p] = slices.Clone(b)
	}
	return out
}
