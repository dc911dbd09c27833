package client

import (
	"context"
	"iter"

	"github.com/dwr-run/dwr/schemas"
)

// The commands and queries of rituals: versioned templates of a goal and
// its first plan, with parameters. What a ritual makes is an ordinary goal.

// DefineRitual stores the next version of a ritual (ritual.define): its
// Result's ID is the ritual's name and Version the version, 1, 2, 3...;
// content the same as the latest version's changes nothing (Duplicate,
// that version). A parameters schema that does not compile, or a template
// that refers to a parameter it does not declare, is refused (ErrInvalid,
// the *schemas.Error naming the field).
func (c *Client) DefineRitual(ctx context.Context, r schemas.DefineRitual, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "ritual.define", r, opts)
}

// RunRitual creates a goal and its first plan from a ritual's version
// (ritual.run; r.Version 0 is the latest), as CreateGoal with tasks would:
// Result.ID is the goal's id and Result.Tasks maps each key to its task
// id. A param that fails the ritual's parameters schema is refused
// (ErrInvalid, naming /params/<name>), and so is a rendered goal that
// goal.create would refuse (naming /ritual/goal/... or /ritual/tasks/...).
func (c *Client) RunRitual(ctx context.Context, r schemas.RunRitual, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "ritual.run", r, opts)
}

// Ritual returns a version of the ritual name, whole (ritual.get; version
// 0 is the latest), or ErrNotFound.
func (c *Client) Ritual(ctx context.Context, name string, version uint64, opts ...CallOption) (*schemas.RitualVersion, error) {
	var v schemas.RitualVersion
	if _, err := c.Query(ctx, "ritual.get", schemas.Query{ID: name, Version: version}, &v, opts...); err != nil {
		return nil, err
	}
	return &v, nil
}

// Rituals lists the workspace's rituals by name, each with its latest
// version (ritual.list), page by page.
func (c *Client) Rituals(ctx context.Context, opts ...CallOption) iter.Seq2[*schemas.Ritual, error] {
	return List[schemas.Ritual](ctx, c, "ritual.list", schemas.Query{}, opts...)
}
