package client

import (
	"context"
	"iter"

	"github.com/dwr-run/dwr/schemas"
)

// The commands and queries of schedules: a goal and its first plan started
// at each slot of a cron spec, or every period, in a time zone, exactly once
// per slot. What a slot starts is an ordinary goal, which names the
// schedule and the slot (Goal.Schedule).

// CreateSchedule creates a schedule (schedule.create): its Result's ID is
// the schedule's name. The same spec again changes nothing (Duplicate);
// another spec under a name that exists is ErrConflict. A spec that is not
// cron, a period under 1s, an unknown time zone, or a goal or tasks that
// goal.create would refuse is ErrInvalid, the *schemas.Error naming the
// field (/cron, /every, /time_zone, /goal/..., /tasks/...).
func (c *Client) CreateSchedule(ctx context.Context, s schemas.CreateSchedule, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "schedule.create", s, opts)
}

// PauseSchedule stops the schedule name from firing until it is resumed
// (schedule.pause), or returns ErrNotFound.
func (c *Client) PauseSchedule(ctx context.Context, name string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "schedule.pause", schemas.PauseSchedule{Name: name}, opts)
}

// ResumeSchedule lets the paused schedule name fire again, from its first
// slot after now (schedule.resume), or returns ErrNotFound.
func (c *Client) ResumeSchedule(ctx context.Context, name string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "schedule.resume", schemas.ResumeSchedule{Name: name}, opts)
}

// DeleteSchedule ends the schedule name (schedule.delete), or returns
// ErrNotFound. The goals it started stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "schedule.delete", schemas.DeleteSchedule{Name: name}, opts)
}

// Schedule returns the schedule name (schedule.get), or ErrNotFound.
func (c *Client) Schedule(ctx context.Context, name string, opts ...CallOption) (*schemas.Schedule, error) {
	var s schemas.Schedule
	if _, err := c.Query(ctx, "schedule.get", schemas.Query{ID: name}, &s, opts...); err != nil {
		return nil, err
	}
	return &s, nil
}

// Schedules lists the workspace's schedules by name (schedule.list), page
// by page.
func (c *Client) Schedules(ctx context.Context, opts ...CallOption) iter.Seq2[*schemas.Schedule, error] {
	return List[schemas.Schedule](ctx, c, "schedule.list", schemas.Query{}, opts...)
}
