// Package executors is the executor SDK: the client side of the work an
// executor does for dwr. A Worker takes work items from one queue, claims
// each task, runs a Handler with the task's input, last checkpoint and
// earlier attempts, keeps the lease while it runs, and reports the result;
// package executortest runs a Handler without a server, and package shell
// is the built-in executor that runs any program (`dwr worker`).
//
//	w, err := executors.NewWorker(executors.Config{Conn: nc, Queue: "shell"},
//		func(ctx context.Context, job *executors.Job) (executors.Result, error) {
//			var in Input
//			if err := job.Decode(&in); err != nil {
//				return executors.Result{}, executors.Permanent(err)
//			}
//			... // side effects keyed by job.OperationKey; job.SaveCheckpoint(ctx, progress)
//			return executors.Result{Output: out}, nil
//		})
//	err = w.Run(ctx) // until ctx ends, then drains
//
// # The protocol
//
// An executor in any language can do what this package does; it relies on
// the wire contract only (README, schemas/):
//
//   - Work items. The service publishes one message per ready task on the
//     JetStream stream DWR_WORK (work-queue retention), subject
//     dwr.work.<workspace>.<queue>, with header Nats-Msg-Id
//     "<task_id>.<attempt>" and a JSON body (schemas.WorkItem) that names
//     the attempt to claim and nothing more: {"kind": "execute", "task_id",
//     "workspace", "queue", "attempt" (the number the claim will start),
//     "operation_key", "task"}: the task as it stood when the item was
//     dispatched (absent when too large). An item this
//     SDK cannot run (malformed, or of another kind) is handed back with a
//     delay of one lease: for an executor that can or, past MaxDeliver, for
//     the service's quarantine.
//   - Consumer. Every worker of a queue shares the durable pull consumer
//     dwr-<workspace>-<queue> (created or updated by each worker): explicit
//     acks, AckWait = Config.Lease, MaxDeliver = Config.MaxDeliver (past it
//     the service quarantines the item and fails the task). A worker fetches
//     no more items than it has free slots (Config.Concurrency), and renews
//     each item's lease with InProgress every Lease/3 until it is settled.
//   - Lazy claim. A first delivery of an item that carries its task, ready
//     for the item's attempt, at most a second old, runs its job at once on
//     that task, unclaimed; the worker claims (below, with "omit_task":
//     true) at the job's first command of the attempt (checkpoint, wait,
//     approval request) or when its first heartbeat is due, and a job that
//     ends before either reports with "claim": {"executor",
//     "executor_version"} instead of a token: the service starts and ends
//     the attempt in one commit, while the task is still ready for it, and
//     refuses it with conflict otherwise (nothing is recorded; the item is
//     settled as a lost attempt's). A lazy claim refused cancels the job
//     with ErrCancelled (the task ended) or ErrLeaseLost. Every other item
//     is claimed before its job runs.
//   - Claim. Request dwr.cmd.<ws>.task.claim {"task_id", "executor",
//     "executor_version", "omit_task"} with header Dwr-Command-Id
//     "claim.<task>.<attempt>.<delivery>", so a retried claim returns its
//     first outcome. The reply holds the attempt started, its token_hash,
//     and, unless omit_task was set (the item carried the task) and the
//     claim superseded nothing, the task as it stands after the claim — the
//     Job is built from it (else from the item's task): input, checkpoint,
//     earlier attempts, verifications, signal, decisions, the attempt's
//     deadline — and the attempt's "token": a secret (Job.Token) that every
//     later command of the attempt carries, and that only the identity that
//     claimed may use (a retried claim returns the same token). A claim refused with
//     conflict or not_found means the item is stale: it is acknowledged and
//     no job runs. But when the item was redelivered and the task is still
//     running an attempt m that was started from this item (its holder lost
//     the lease: every attempt from the item's up to m was abandoned), the
//     worker claims again with "supersedes": m (command id suffixed
//     ".s<m>"); the service records m as abandoned and starts m+1 — once
//     the queue's lease has passed since m was last heard from. Before that
//     it refuses with conflict and error.retry_after, and the worker, still
//     holding the item, claims again at that moment (up to three times).
//   - Heartbeat. With every InProgress, once the attempt is claimed, the
//     worker sends task.heartbeat {"task_id", "attempt", "token"} (one try,
//     answered from the writer's memory, never recorded, its command id
//     not remembered): the service counts an attempt alive from its claim,
//     its checkpoints and its heartbeats.
//   - Events. While it holds an item the worker follows
//     dwr.ev.<ws>.task.<task_id>.>; task.cancelled, task.failed and
//     task.rejected cancel the job's context with cause ErrCancelled,
//     task.attempt_abandoned of its attempt with ErrLeaseLost, and
//     task.attempt_failed of its attempt (the service's deadline timer) with
//     ErrTimeout. A job whose work item carries a timeout also has the
//     attempt's deadline on its context.
//   - Checkpoint. dwr.cmd.<ws>.task.checkpoint {"task_id", "attempt",
//     "token", "checkpoint"}, command id "checkpoint.<task>.<attempt>.<n>"
//     for the n-th save of the attempt. Refused with conflict: the attempt
//     no longer holds the task, and the job's context is cancelled. Every
//     command of an attempt without its token, or from another identity
//     than the claimer, is refused (forbidden, field /token) and recorded
//     nowhere, so a command id squatted that way stays free.
//   - Report. task.succeed {"task_id", "attempt", "token", "result",
//     "artifacts", "model_steps"} (id "succeed.<task>.<attempt>"; every
//     artifact it names must be stored first: Job.PutArtifact) or
//     task.fail {"task_id", "attempt", "token", "error": {"code",
//     "message"}, "retryable"} (id "fail.<task>.<attempt>"); a report that
//     carries its claim instead of a token has the delivery appended to its
//     id ("succeed.<task>.<attempt>.<delivery>"), since two deliveries of
//     one item may report the same attempt. Command ids are the sender's
//     own: the same id from another identity is another command. A result the service refuses as invalid is
//     reported as a failure with code CodeInvalidResult instead. Once the
//     service answers, the item is acknowledged — except after a refusal
//     (fencing) when a redelivery of the same item now runs a newer attempt:
//     JetStream acknowledges by stream sequence, so that holder's item is
//     left to it.
//   - Waits. A handler that returns Sleep or AwaitSignal is reported with
//     task.wait {"task_id", "attempt", "token", "kind": "timer"|"signal",
//     "until", "signal"} (id "wait.<task>.<attempt>"): the attempt ends
//     parked.
//   - Approvals. The claimed task carries "approvals", each {"id"
//     ("<task>-<n>"), "attempt" (0 for a gate), "action", "action_digest",
//     "state", "decision": {"response", "approver", "role", "comment",
//     "decided_at", ...}}. An attempt asks with task.request_approval
//     {"task_id", "attempt", "token", "action", "summary", "basis", "role",
//     "responses", "branches", "on_expiry", "escalate_to", "expires_in"}
//     (id "approval.<task>.<attempt>.<hex of the action digest>"); the
//     reply names the "approval_id", and the request itself parks the
//     attempt (task state waiting, wait {"kind": "approval",
//     "approval_id"}), so nothing more is reported and the item is
//     acknowledged. The action digest is "sha256:" and the hex SHA-256 of
//     the action's canonical JSON: object keys sorted, no insignificant
//     space, numbers as written, no HTML escaping (ActionDigest). A
//     decision (approval.decide, signed by a registered approver over the
//     approval id, the response and the digest) resumes the task as a new
//     attempt or ends it, as the request's branches say.
//   - Delegations. An attempt hands work on with task.delegate {"task_id",
//     "attempt", "token", "key", "goal" | "ritual", "on_failure"} (id
//     "delegate.<task>.<attempt>.<key>"): the reply names the child goal
//     ("goal_id"), the attempt is parked (wait {"kind": "delegation",
//     "goal_id"}) and the item is acknowledged. The task keeps its
//     "delegations", each {"key", "goal_id", "attempt", "on_failure",
//     "state", "reason", "tasks"}; the resumed attempt reads the accepted
//     results of an ended one's tasks with task.get.
//   - Retries. Every command is retried with its command id on timeouts,
//     missing responders and "unavailable" replies until the service answers
//     or the worker's drain deadline passes (the worker sends them through
//     the Go client, package client, and logs a warning at the third try
//     and every twentieth); queries carry Dwr-Min-Seq, so they read what
//     the worker's own commands wrote. An item whose report was never
//     answered stays unacknowledged and is redelivered after the lease. A
//     claim refused for another reason (forbidden, invalid) is handed back
//     with a delay of one lease.
//
// # Approvals
//
// Before a consequential side effect, a handler asks a person to approve
// the exact action, and performs it only once approved:
//
//	action := Refund{Order: in.Order, Cents: in.Cents}
//	for {
//		d, err := job.RequestApproval(ctx, executors.ApprovalRequest{Action: action,
//			Summary: "refund order " + in.Order, Role: "finance",
//			Responses: []string{executors.ResponseApprove, executors.ResponseReject, executors.ResponseRevise}})
//		if err != nil {
//			return executors.Result{}, err // a *WaitError: the task waits, the worker is free
//		}
//		switch d.Response {
//		case executors.ResponseApprove:
//			return refund(ctx, job.OperationKey, action) // exactly the approved action
//		case executors.ResponseRevise:
//			action = revise(action, d.Comment) // an altered action: asked again
//		default:
//			return executors.Result{}, executors.Permanent(errors.New("refund " + d.Response + "ed"))
//		}
//	}
//
// The first RequestApproval records the request and the handler returns:
// the task waits durably (`dwr approvals list`), holding no worker. A
// decision resumes it as a new attempt, handed the task's decisions
// (Job.Decisions, Job.Approval), where the same RequestApproval returns the
// decision on that action instead of asking again. A decision is bound to
// the action's digest and to the role it was asked of: an altered action
// is a new request, a decision on one action cannot authorize another, and
// one role's decision does not stand for another's (two sign-offs on one
// action are two requests, each of its role).
//
// # Delegation
//
// A handler hands work on to a child goal that the service tracks for its
// task, and resumes with the results:
//
//	out, err := job.Delegate(ctx, executors.Delegation{Key: "sources", Title: "gather the sources",
//		Tasks: []schemas.TaskSpec{{Key: "crm", Queue: "agents"}}})
//	if err != nil {
//		return executors.Result{}, err // a *WaitError: the task waits for its child goal
//	}
//	return executors.Result{Output: out.Results["crm"].Result}, nil
//
// The first Delegate records the delegation and the handler returns: the
// task waits, holding no worker, until the child goal ends. Achieved, a new
// attempt runs, handed Job.Delegations, where the same Delegate returns the
// child tasks' accepted results; failed or cancelled, the task fails, waits
// for a review, or resumes with the outcome and ErrDelegationFailed, as
// Delegation.OnFailure says. Cancelling the task cancels the child goal.
//
// Handler errors: a returned error is a retryable failure; Permanent(err)
// is not retried; a Failure sets the code, message and retryability. A
// panicking handler is recovered and reported as a retryable failure with
// code CodePanic.
//
// Connect with nats.MaxReconnects(-1): the worker then rides out server
// restarts, retrying its fetches (with backoff, recreating the consumer when
// it is gone) and its commands; only a closed connection ends Run.
//
// An executor is written against the wire contract only. This package may
// import the standard library, schemas (the wire contract: its JSON Schemas
// and the same contract as Go types — work items, command bodies, replies,
// the task a claim returns — which this package uses rather than declaring
// its own), its own sub-packages (client, the Go client it sends its
// commands and queries through, which imports only schemas) and the NATS
// client libraries; never domain, eventstore,
// projections or handlers, so that an executor in any language can rely on
// exactly what a Go executor relies on. Approvers sign their decisions with
// the keys of signing.go, over the message the wire contract names
// (DecisionMessage); Decide (decide.go) and CreateKey (keys.go) are the
// flows of `dwr approve` and `dwr keys create` for any caller. Its tests start a real service (handlers,
// handlers/embedded, projections).
package executors
