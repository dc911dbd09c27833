package schemas

import (
	"encoding/json"
	"slices"
	"time"
)

// Catch-up policies of a schedule: what a firing does with the slots that
// passed while no timer fired (the service was down).
const (
	// CatchUpSkip starts a goal only for a slot at most a minute old.
	CatchUpSkip = "skip"
	// CatchUpOne starts one goal, for the latest slot due.
	CatchUpOne = "one"
	// CatchUpAll starts a goal for every slot due (at most 100 a firing).
	CatchUpAll = "all"
)

// Overlap policies of a schedule: whether a slot starts a goal while the
// goal of an earlier firing is still open.
const (
	// OverlapSkip skips the slot (recorded, reason overlap).
	OverlapSkip = "skip"
	// OverlapAllow starts the goal all the same.
	OverlapAllow = "allow"
)

// Reasons a schedule's slot started no goal (ScheduleSkipped.Reason).
const (
	// SkipMissed: the slot passed while no timer fired, and the catch-up
	// policy leaves it out.
	SkipMissed = "missed"
	// SkipOverlap: the schedule's earlier goal was still open.
	SkipOverlap = "overlap"
	// SkipRefused: goal.create refused the slot's goal (the workspace
	// changed since the schedule was created).
	SkipRefused = "refused"
)

// ScheduleSpec is what a schedule is: when its slots come (Cron, a
// standard 5-field cron spec or a descriptor such as @hourly, or Every, a
// period from the moment it was created), in which time zone, with which
// policies, and the goal and first plan each slot starts.
type ScheduleSpec struct {
	Cron  string   `json:"cron,omitempty"`
	Every Duration `json:"every,omitempty"`
	// TimeZone is an IANA zone name ("Europe/Paris"); absent, UTC.
	TimeZone string `json:"time_zone,omitempty"`
	CatchUp  string `json:"catch_up,omitempty"` // skip | one | all; absent, one
	Overlap  string `json:"overlap,omitempty"`  // skip | allow; absent, skip
	// Goal is what goal.create takes, minus goal_id and tasks.
	Goal json.RawMessage `json:"goal"`
	// Tasks is the goal's first plan: what goal.create's tasks take.
	Tasks json.RawMessage `json:"tasks"`
}

// CreateSchedule creates the schedule Name. A name that exists is a
// conflict, unless its spec is the same (CommandResult.Duplicate).
type CreateSchedule struct {
	Name string `json:"name"`
	ScheduleSpec
}

// PauseSchedule stops the schedule Name from firing until it is resumed.
type PauseSchedule struct {
	Name string `json:"name"`
}

// ResumeSchedule lets a paused schedule fire again, from its next slot
// after now: the slots that passed while it was paused are not caught up.
type ResumeSchedule struct {
	Name string `json:"name"`
}

// DeleteSchedule ends the schedule Name: it fires no more, and its name
// may be created again.
type DeleteSchedule struct {
	Name string `json:"name"`
}

// ScheduleRef names the schedule and the slot a goal was started for.
type ScheduleRef struct {
	Name string    `json:"name"`
	Slot time.Time `json:"slot"`
}

// Schedule is the state of a schedule, as schedule.get and schedule.list
// answer it.
type Schedule struct {
	Workspace string `json:"workspace"`
	Name      string `json:"name"`
	ScheduleSpec
	Paused  bool `json:"paused,omitempty"`
	Deleted bool `json:"deleted,omitempty"`
	// LastSlot is the latest slot fired or skipped.
	LastSlot *time.Time `json:"last_slot,omitempty"`
	// NextSlot is the slot the schedule's timer waits for; absent while it
	// is paused or deleted, or waits for its goal to end (WaitsFor).
	NextSlot *time.Time `json:"next_slot,omitempty"`
	// LastGoal is the goal the latest fired slot started.
	LastGoal string `json:"last_goal,omitempty"`
	// WaitsFor, with overlap skip, is the goal still open at the last slot
	// whose end the schedule waits for (NextSlot is absent meanwhile): a
	// schedule whose goal stays open records no slot until then.
	WaitsFor string `json:"waits_for,omitempty"`
	Fired    uint64 `json:"fired,omitempty"`   // slots that started a goal
	Skipped  uint64 `json:"skipped,omitempty"` // slots that did not
	Versioned
}

// Clone returns a copy of s that shares nothing with it.
func (s *Schedule) Clone() *Schedule {
	c := *s
	c.Commands = slices.Clone(s.Commands)
	return &c
}

// CommandName returns "schedule.create".
func (CreateSchedule) CommandName() string { return "schedule.create" }

// CommandName returns "schedule.pause".
func (PauseSchedule) CommandName() string { return "schedule.pause" }

// CommandName returns "schedule.resume".
func (ResumeSchedule) CommandName() string { return "schedule.resume" }

// CommandName returns "schedule.delete".
func (DeleteSchedule) CommandName() string { return "schedule.delete" }
