package client

import (
	"context"
	"iter"

	"github.com/dwr-run/dwr/schemas"
)

// The commands and queries of a workspace's administration: the workspace
// itself, its members, its approvers and its queues. The workspace is the
// Client's (In gives a Client of another).

// CreateWorkspace creates the Client's workspace (workspace.create); w.Name
// empty means the Client's.
func (c *Client) CreateWorkspace(ctx context.Context, w schemas.CreateWorkspace, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "workspace.create", w, opts)
}

// Workspaces lists the workspaces, with their members, approvers and
// queues (workspace.list).
func (c *Client) Workspaces(ctx context.Context, opts ...CallOption) iter.Seq2[*schemas.Workspace, error] {
	return List[schemas.Workspace](ctx, c, "workspace.list", schemas.Query{}, opts...)
}

// AddMember gives an identity a role in the workspace (member.add): a new
// member, or a replaced one (another key, role or queues) under the same
// name.
func (c *Client) AddMember(ctx context.Context, m schemas.AddMember, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "member.add", m, opts)
}

// RemoveMember removes a member from the workspace (member.remove): its
// connections lose the workspace at once.
func (c *Client) RemoveMember(ctx context.Context, name string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "member.remove", schemas.RemoveMember{Name: name}, opts)
}

// Members lists the workspace's members by name (member.list), page by
// page.
func (c *Client) Members(ctx context.Context, opts ...CallOption) iter.Seq2[*schemas.Member, error] {
	return List[schemas.Member](ctx, c, "member.list", schemas.Query{}, opts...)
}

// RevokeApprover revokes a registered approver (approver.revoke): its
// decisions are refused from then on. (RegisterApprover registers one.)
func (c *Client) RevokeApprover(ctx context.Context, name string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "approver.revoke", schemas.RevokeApprover{Name: name}, opts)
}

// Approvers lists the workspace's approvers and their keys
// (approver.list).
func (c *Client) Approvers(ctx context.Context, opts ...CallOption) iter.Seq2[*schemas.Approver, error] {
	return List[schemas.Approver](ctx, c, "approver.list", schemas.Query{}, opts...)
}

// ConfigureQueue sets a queue's lease and deliveries (queue.configure).
// The Result's Queue, LeaseMS and MaxDeliver are the settings in effect:
// with q.IfUnset, the queue's own when it had some already.
func (c *Client) ConfigureQueue(ctx context.Context, q schemas.ConfigureQueue, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "queue.configure", q, opts)
}

// DeleteQueue removes a queue that no task that has not ended is given
// (queue.delete): its consumer and its settings, so that it no longer
// counts against the workspace's bound on queues.
func (c *Client) DeleteQueue(ctx context.Context, queue string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "queue.delete", schemas.DeleteQueue{Queue: queue}, opts)
}

// PauseQueue pauses a queue (queue.pause): its consumer hands out no job,
// and no report hands its sender the queue's next task, until ResumeQueue;
// the jobs already handed out run on. The Result's Paused is true and its
// Queue, LeaseMS, MaxDeliver and MaxRunning are the settings in effect.
func (c *Client) PauseQueue(ctx context.Context, queue string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "queue.pause", schemas.PauseQueue{Queue: queue}, opts)
}

// ResumeQueue lets a paused queue hand out its jobs again (queue.resume),
// those that joined it meanwhile first.
func (c *Client) ResumeQueue(ctx context.Context, queue string, opts ...CallOption) (*Result, error) {
	return c.do(ctx, "queue.resume", schemas.ResumeQueue{Queue: queue}, opts)
}

// Queues lists the workspace's queues (queue.list): those configured,
// then those that stand without a configuration.
func (c *Client) Queues(ctx context.Context, opts ...CallOption) iter.Seq2[*schemas.Queue, error] {
	return List[schemas.Queue](ctx, c, "queue.list", schemas.Query{}, opts...)
}
