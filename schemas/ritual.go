package schemas

import (
	"encoding/json"
	"slices"
	"time"
)

// RitualTemplate is the content of one version of a ritual: its parameters
// and the goal and plan it renders. Goal and Tasks are templates: JSON
// where a string "${name}" stands for the parameter name's value (and
// "${name}" inside a longer string for its text; "$${" is a literal "${"),
// which ritual.run replaces before it creates the goal as goal.create would.
type RitualTemplate struct {
	Description string `json:"description,omitempty"`
	// Parameters is a JSON Schema (draft 2020-12) for the params object of
	// ritual.run: every parameter a template refers to is one of its
	// properties; a property's default applies when a run leaves it out.
	Parameters json.RawMessage `json:"parameters"`
	// Goal is what goal.create takes, minus goal_id and tasks.
	Goal json.RawMessage `json:"goal"`
	// Tasks is the goal's first plan: what goal.create's tasks take.
	Tasks json.RawMessage `json:"tasks"`
}

// DefineRitual stores the next version of the ritual Name. Content the
// same as its latest version's changes nothing and answers that version
// (CommandResult.Duplicate).
type DefineRitual struct {
	Name string `json:"name"`
	RitualTemplate
}

// RunRitual creates a goal with its first plan from a version of the
// ritual Name (its latest when Version is 0), with Params for its
// parameters, as goal.create with tasks would, with the id GoalID when it is
// set.
type RunRitual struct {
	Name    string          `json:"name"`
	Version uint64          `json:"version,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	GoalID  string          `json:"goal_id,omitempty"`
	// Labels are set on the goal over those its template gives.
	Labels Labels `json:"labels,omitempty"`
	// Key is the goal's key over the one its template renders, and
	// IfOpen what the run does while an open goal holds it
	// (CreateGoal.Key, IfOpen).
	Key    string `json:"key,omitempty"`
	IfOpen string `json:"if_open,omitempty"`

	// Rendered is the goal the service rendered from the ritual's version
	// before it sealed its payloads; the domain creates it as it would the
	// one it renders. It is never read from, or written to, the wire.
	Rendered *RenderedRitual `json:"-"`
}

// RenderedRitual is a ritual version rendered with a run's params: the
// goal.create it makes, and the version it came from.
type RenderedRitual struct {
	Goal   *CreateGoal
	Ritual RitualRef
}

// RitualRef names a version of a ritual: the one a goal was created from.
type RitualRef struct {
	Name    string `json:"name"`
	Version uint64 `json:"version"`
}

// Ritual is the state of a ritual: its name and its latest version
// (Versioned.Version, which counts its versions), as ritual.list lists it.
type Ritual struct {
	Workspace   string `json:"workspace"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"` // the latest version's
	Digest      string `json:"digest"`                // the latest version's (RitualVersion.Digest)
	Versioned
}

// Clone returns a copy of r that shares nothing with it.
func (r *Ritual) Clone() *Ritual {
	c := *r
	c.Commands = slices.Clone(r.Commands)
	return &c
}

// RitualVersion is one version of a ritual, as ritual.get answers it.
type RitualVersion struct {
	Workspace string `json:"workspace"`
	Name      string `json:"name"`
	Version   uint64 `json:"version"`
	// Digest is the SHA-256 of the version's content, RitualTemplate in
	// canonical JSON (CanonicalJSON), hex-encoded.
	Digest string `json:"digest"`
	RitualTemplate
	DefinedAt time.Time `json:"defined_at"`
	DefinedBy string    `json:"defined_by"`
}

// CommandName returns "ritual.define".
func (DefineRitual) CommandName() string { return "ritual.define" }

// CommandName returns "ritual.run".
func (RunRitual) CommandName() string { return "ritual.run" }
