package domain

import (
	"maps"
	"slices"

	"github.com/dwr-run/dwr/schemas"
)

// Role is what a member of a workspace may do there. Roles are deny by
// default: a command or query a role does not list is refused (MayCommand,
// MayQuery).
type Role = schemas.Role

// The roles of a workspace member.
const (
	// RoleAdmin may send every command and query of its workspace,
	// including registering approvers and adding or removing members.
	RoleAdmin = schemas.RoleAdmin
	// RoleClient starts and steers work: goals, plans, tasks, rituals, schedules,
	// signals, cancellations and reviews, and every query.
	RoleClient Role = "client"
	// RoleExecutor takes work from its queues: it claims, checkpoints,
	// heartbeats, waits, requests approvals and reports, only for tasks on
	// its queues.
	RoleExecutor Role = "executor"
	// RoleApprover decides approvals and reads them.
	RoleApprover Role = "approver"
	// RoleViewer reads: every query and the event feed, no command.
	RoleViewer Role = "viewer"
)

// Roles lists every role, in the order the CLI shows them.
var Roles = []Role{RoleAdmin, RoleClient, RoleExecutor, RoleApprover, RoleViewer}

// ValidRole reports whether r is one of Roles.
func ValidRole(r Role) bool {
	for _, x := range Roles {
		if x == r {
			return true
		}
	}
	return false
}

// ExecutorCommands are the commands of an attempt: an executor sends them
// only for tasks on its queues.
var ExecutorCommands = map[string]bool{
	"task.claim": true, "task.checkpoint": true, "task.heartbeat": true, "task.succeed": true,
	"task.fail": true, "task.wait": true, "task.request_approval": true, "task.verify": true,
	"task.delegate":   true,
	"queue.configure": true,
}

var clientCommands = map[string]bool{
	"goal.create": true, "goal.cancel": true, "goal.label": true, "goal.prioritize": true, "plan.submit": true, "task.create": true,
	"task.cancel": true, "task.retry": true, "task.label": true, "task.review": true, "task.signal": true,
	"ritual.define": true, "ritual.run": true,
	"schedule.create": true, "schedule.pause": true, "schedule.resume": true, "schedule.delete": true,
}

var approverQueries = map[string]bool{
	"approval.list": true, "approval.get": true, "approver.list": true, "task.get": true,
	"artifact.get": true, "artifact.info": true,
}

// executorQueries are an executor's: its task, and the artifacts its jobs
// read (dependencies', evidence) and make.
var executorQueries = map[string]bool{
	"task.get": true, "queue.key": true, "artifact.get": true, "artifact.info": true, "artifact.chunk": true, "artifact.put": true,
}

// executorOnly are the queries only an executor (or an admin) may send:
// queue.key hands the key that opens a queue's work items to whoever works
// the queue, and nobody else needs it.
var executorOnly = map[string]bool{"queue.key": true}

// ArtifactWrites are the query subjects that store an artifact: a viewer
// may read artifacts, not make them.
var ArtifactWrites = map[string]bool{"artifact.chunk": true, "artifact.put": true}

// MayCommand reports whether a member with role r may send the named
// command in its workspace.
func MayCommand(r Role, name string) bool {
	switch r {
	case RoleAdmin:
		return name != "workspace.create"
	case RoleClient:
		return clientCommands[name]
	case RoleExecutor:
		return ExecutorCommands[name]
	case RoleApprover:
		return name == "approval.decide"
	}
	return false
}

// MayQuery reports whether a member with role r may send the named query
// in its workspace.
func MayQuery(r Role, name string) bool {
	switch r {
	case RoleAdmin:
		return true
	case RoleClient:
		return !executorOnly[name]
	case RoleViewer:
		return !ArtifactWrites[name] && !executorOnly[name]
	case RoleExecutor:
		return executorQueries[name]
	case RoleApprover:
		return approverQueries[name]
	}
	return false
}

// QueryNames returns the queries role r is limited to, or nil when it may
// send every query (or none: see MayQuery).
func QueryNames(r Role) []string {
	switch r {
	case RoleExecutor:
		return slices.Sorted(maps.Keys(executorQueries))
	case RoleApprover:
		return slices.Sorted(maps.Keys(approverQueries))
	}
	return nil
}
