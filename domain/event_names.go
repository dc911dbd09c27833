package domain

// The wire names of the events; the table in events.go must list the same.

// EventType returns "workspace.created".
func (*WorkspaceCreated) EventType() string { return "workspace.created" }

// AggregateType returns AggWorkspace.
func (*WorkspaceCreated) AggregateType() string { return AggWorkspace }
func (*WorkspaceCreated) isEvent()              {}

// EventType returns "goal.created".
func (*GoalCreated) EventType() string { return "goal.created" }

// AggregateType returns AggGoal.
func (*GoalCreated) AggregateType() string { return AggGoal }
func (*GoalCreated) isEvent()              {}

// EventType returns "goal.plan_committed".
func (*PlanCommitted) EventType() string { return "goal.plan_committed" }

// AggregateType returns AggGoal.
func (*PlanCommitted) AggregateType() string { return AggGoal }
func (*PlanCommitted) isEvent()              {}

// EventType returns "goal.achieved".
func (*GoalAchieved) EventType() string { return "goal.achieved" }

// AggregateType returns AggGoal.
func (*GoalAchieved) AggregateType() string { return AggGoal }
func (*GoalAchieved) isEvent()              {}

// EventType returns "goal.budget_extended".
func (*GoalBudgetExtended) EventType() string { return "goal.budget_extended" }

// AggregateType returns AggGoal.
func (*GoalBudgetExtended) AggregateType() string { return AggGoal }
func (*GoalBudgetExtended) isEvent()              {}

// EventType returns "goal.failed".
func (*GoalFailed) EventType() string { return "goal.failed" }

// AggregateType returns AggGoal.
func (*GoalFailed) AggregateType() string { return AggGoal }
func (*GoalFailed) isEvent()              {}

// EventType returns "goal.cancelled".
func (*GoalCancelled) EventType() string { return "goal.cancelled" }

// AggregateType returns AggGoal.
func (*GoalCancelled) AggregateType() string { return AggGoal }
func (*GoalCancelled) isEvent()              {}

// EventType returns "goal.labeled".
func (*GoalLabeled) EventType() string { return "goal.labeled" }

// AggregateType returns AggGoal.
func (*GoalLabeled) AggregateType() string { return AggGoal }
func (*GoalLabeled) isEvent()              {}

// EventType returns "goal.prioritized".
func (*GoalPrioritized) EventType() string { return "goal.prioritized" }

// AggregateType returns AggGoal.
func (*GoalPrioritized) AggregateType() string { return AggGoal }
func (*GoalPrioritized) isEvent()              {}

// EventType returns "task.labeled".
func (*TaskLabeled) EventType() string { return "task.labeled" }

// AggregateType returns AggTask.
func (*TaskLabeled) AggregateType() string { return AggTask }
func (*TaskLabeled) isEvent()              {}

// EventType returns "task.created".
func (*TaskCreated) EventType() string { return "task.created" }

// AggregateType returns AggTask.
func (*TaskCreated) AggregateType() string { return AggTask }
func (*TaskCreated) isEvent()              {}

// EventType returns "task.ready".
func (*TaskReady) EventType() string { return "task.ready" }

// AggregateType returns AggTask.
func (*TaskReady) AggregateType() string { return AggTask }
func (*TaskReady) isEvent()              {}

// EventType returns "task.waiting".
func (*TaskWaiting) EventType() string { return "task.waiting" }

// AggregateType returns AggTask.
func (*TaskWaiting) AggregateType() string { return AggTask }
func (*TaskWaiting) isEvent()              {}

// EventType returns "task.attempt_started".
func (*AttemptStarted) EventType() string { return "task.attempt_started" }

// AggregateType returns AggTask.
func (*AttemptStarted) AggregateType() string { return AggTask }
func (*AttemptStarted) isEvent()              {}

// EventType returns "task.attempt_abandoned".
func (*AttemptAbandoned) EventType() string { return "task.attempt_abandoned" }

// AggregateType returns AggTask.
func (*AttemptAbandoned) AggregateType() string { return AggTask }
func (*AttemptAbandoned) isEvent()              {}

// EventType returns "task.checkpoint_saved".
func (*CheckpointSaved) EventType() string { return "task.checkpoint_saved" }

// AggregateType returns AggTask.
func (*CheckpointSaved) AggregateType() string { return AggTask }
func (*CheckpointSaved) isEvent()              {}

// EventType returns "task.attempt_succeeded".
func (*AttemptSucceeded) EventType() string { return "task.attempt_succeeded" }

// AggregateType returns AggTask.
func (*AttemptSucceeded) AggregateType() string { return AggTask }
func (*AttemptSucceeded) isEvent()              {}

// EventType returns "task.attempt_failed".
func (*AttemptFailed) EventType() string { return "task.attempt_failed" }

// AggregateType returns AggTask.
func (*AttemptFailed) AggregateType() string { return AggTask }
func (*AttemptFailed) isEvent()              {}

// EventType returns "task.backoff_scheduled".
func (*BackoffScheduled) EventType() string { return "task.backoff_scheduled" }

// AggregateType returns AggTask.
func (*BackoffScheduled) AggregateType() string { return AggTask }
func (*BackoffScheduled) isEvent()              {}

// EventType returns "task.verification_recorded".
func (*VerificationRecorded) EventType() string { return "task.verification_recorded" }

// AggregateType returns AggTask.
func (*VerificationRecorded) AggregateType() string { return AggTask }
func (*VerificationRecorded) isEvent()              {}

// EventType returns "task.review_decided".
func (*ReviewDecided) EventType() string { return "task.review_decided" }

// AggregateType returns AggTask.
func (*ReviewDecided) AggregateType() string { return AggTask }
func (*ReviewDecided) isEvent()              {}

// EventType returns "task.approval_decided".
func (*ApprovalDecided) EventType() string { return "task.approval_decided" }

// AggregateType returns AggTask.
func (*ApprovalDecided) AggregateType() string { return AggTask }
func (*ApprovalDecided) isEvent()              {}

// EventType returns "task.signal_received".
func (*SignalReceived) EventType() string { return "task.signal_received" }

// AggregateType returns AggTask.
func (*SignalReceived) AggregateType() string { return AggTask }
func (*SignalReceived) isEvent()              {}

// EventType returns "task.signal_buffered".
func (*SignalBuffered) EventType() string { return "task.signal_buffered" }

// AggregateType returns AggTask.
func (*SignalBuffered) AggregateType() string { return AggTask }
func (*SignalBuffered) isEvent()              {}

// EventType returns "task.accepted".
func (*TaskAccepted) EventType() string { return "task.accepted" }

// AggregateType returns AggTask.
func (*TaskAccepted) AggregateType() string { return AggTask }
func (*TaskAccepted) isEvent()              {}

// EventType returns "task.rejected".
func (*TaskRejected) EventType() string { return "task.rejected" }

// AggregateType returns AggTask.
func (*TaskRejected) AggregateType() string { return AggTask }
func (*TaskRejected) isEvent()              {}

// EventType returns "task.failed".
func (*TaskFailed) EventType() string { return "task.failed" }

// AggregateType returns AggTask.
func (*TaskFailed) AggregateType() string { return AggTask }
func (*TaskFailed) isEvent()              {}

// EventType returns "task.cancelled".
func (*TaskCancelled) EventType() string { return "task.cancelled" }

// AggregateType returns AggTask.
func (*TaskCancelled) AggregateType() string { return AggTask }
func (*TaskCancelled) isEvent()              {}

// EventType returns "task.retried".
func (*TaskRetried) EventType() string { return "task.retried" }

// AggregateType returns AggTask.
func (*TaskRetried) AggregateType() string { return AggTask }
func (*TaskRetried) isEvent()              {}

// EventType returns "goal.reopened".
func (*GoalReopened) EventType() string { return "goal.reopened" }

// AggregateType returns AggGoal.
func (*GoalReopened) AggregateType() string { return AggGoal }
func (*GoalReopened) isEvent()              {}

// EventType returns "task.approval_requested".
func (*ApprovalRequested) EventType() string { return "task.approval_requested" }

// AggregateType returns AggTask.
func (*ApprovalRequested) AggregateType() string { return AggTask }
func (*ApprovalRequested) isEvent()              {}

// EventType returns "task.approval_signed_off".
func (*ApprovalSignedOff) EventType() string { return "task.approval_signed_off" }

// AggregateType returns AggTask.
func (*ApprovalSignedOff) AggregateType() string { return AggTask }
func (*ApprovalSignedOff) isEvent()              {}

// EventType returns "task.approval_refused".
func (*ApprovalRefused) EventType() string { return "task.approval_refused" }

// AggregateType returns AggTask.
func (*ApprovalRefused) AggregateType() string { return AggTask }
func (*ApprovalRefused) isEvent()              {}

// EventType returns "task.approval_expired".
func (*ApprovalExpired) EventType() string { return "task.approval_expired" }

// AggregateType returns AggTask.
func (*ApprovalExpired) AggregateType() string { return AggTask }
func (*ApprovalExpired) isEvent()              {}

// EventType returns "workspace.approver_registered".
func (*ApproverRegistered) EventType() string { return "workspace.approver_registered" }

// AggregateType returns AggWorkspace.
func (*ApproverRegistered) AggregateType() string { return AggWorkspace }
func (*ApproverRegistered) isEvent()              {}

// EventType returns "workspace.approver_revoked".
func (*ApproverRevoked) EventType() string { return "workspace.approver_revoked" }

// AggregateType returns AggWorkspace.
func (*ApproverRevoked) AggregateType() string { return AggWorkspace }
func (*ApproverRevoked) isEvent()              {}

// EventType returns "workspace.member_added".
func (*MemberAdded) EventType() string { return "workspace.member_added" }

// AggregateType returns AggWorkspace.
func (*MemberAdded) AggregateType() string { return AggWorkspace }
func (*MemberAdded) isEvent()              {}

// EventType returns "workspace.member_removed".
func (*MemberRemoved) EventType() string { return "workspace.member_removed" }

// AggregateType returns AggWorkspace.
func (*MemberRemoved) AggregateType() string { return AggWorkspace }
func (*MemberRemoved) isEvent()              {}

// EventType returns "workspace.queue_configured".
func (*QueueConfigured) EventType() string { return "workspace.queue_configured" }

// AggregateType returns AggWorkspace.
func (*QueueConfigured) AggregateType() string { return AggWorkspace }
func (*QueueConfigured) isEvent()              {}

// EventType returns "workspace.queue_deleted".
func (*QueueDeleted) EventType() string { return "workspace.queue_deleted" }

// AggregateType returns AggWorkspace.
func (*QueueDeleted) AggregateType() string { return AggWorkspace }
func (*QueueDeleted) isEvent()              {}

// EventType returns "workspace.queue_paused".
func (*QueuePaused) EventType() string { return "workspace.queue_paused" }

// AggregateType returns AggWorkspace.
func (*QueuePaused) AggregateType() string { return AggWorkspace }
func (*QueuePaused) isEvent()              {}

// EventType returns "workspace.queue_resumed".
func (*QueueResumed) EventType() string { return "workspace.queue_resumed" }

// AggregateType returns AggWorkspace.
func (*QueueResumed) AggregateType() string { return AggWorkspace }
func (*QueueResumed) isEvent()              {}

// EventType returns "ritual.defined".
func (*RitualDefined) EventType() string { return "ritual.defined" }

// AggregateType returns AggRitual.
func (*RitualDefined) AggregateType() string { return AggRitual }
func (*RitualDefined) isEvent()              {}

// EventType returns "schedule.created".
func (*ScheduleCreated) EventType() string { return "schedule.created" }

// AggregateType returns AggSchedule.
func (*ScheduleCreated) AggregateType() string { return AggSchedule }
func (*ScheduleCreated) isEvent()              {}

// EventType returns "schedule.paused".
func (*SchedulePaused) EventType() string { return "schedule.paused" }

// AggregateType returns AggSchedule.
func (*SchedulePaused) AggregateType() string { return AggSchedule }
func (*SchedulePaused) isEvent()              {}

// EventType returns "schedule.resumed".
func (*ScheduleResumed) EventType() string { return "schedule.resumed" }

// AggregateType returns AggSchedule.
func (*ScheduleResumed) AggregateType() string { return AggSchedule }
func (*ScheduleResumed) isEvent()              {}

// EventType returns "schedule.deleted".
func (*ScheduleDeleted) EventType() string { return "schedule.deleted" }

// AggregateType returns AggSchedule.
func (*ScheduleDeleted) AggregateType() string { return AggSchedule }
func (*ScheduleDeleted) isEvent()              {}

// EventType returns "schedule.fired".
func (*ScheduleFired) EventType() string { return "schedule.fired" }

// AggregateType returns AggSchedule.
func (*ScheduleFired) AggregateType() string { return AggSchedule }
func (*ScheduleFired) isEvent()              {}

// EventType returns "schedule.skipped".
func (*ScheduleSkipped) EventType() string { return "schedule.skipped" }

// AggregateType returns AggSchedule.
func (*ScheduleSkipped) AggregateType() string { return AggSchedule }
func (*ScheduleSkipped) isEvent()              {}

// EventType returns "task.delegated".
func (*TaskDelegated) EventType() string { return "task.delegated" }

// AggregateType returns AggTask.
func (*TaskDelegated) AggregateType() string { return AggTask }
func (*TaskDelegated) isEvent()              {}

// EventType returns "task.delegation_ended".
func (*TaskDelegationEnded) EventType() string { return "task.delegation_ended" }

// AggregateType returns AggTask.
func (*TaskDelegationEnded) AggregateType() string { return AggTask }
func (*TaskDelegationEnded) isEvent()              {}

// EventType returns "task.review_requested".
func (*TaskReviewRequested) EventType() string { return "task.review_requested" }

// AggregateType returns AggTask.
func (*TaskReviewRequested) AggregateType() string { return AggTask }
func (*TaskReviewRequested) isEvent()              {}

// EventType returns "goal.shredded".
func (*GoalShredded) EventType() string { return "goal.shredded" }

// AggregateType returns AggGoal.
func (*GoalShredded) AggregateType() string { return AggGoal }
func (*GoalShredded) isEvent()              {}

// EventType returns "workspace.shredded".
func (*WorkspaceShredded) EventType() string { return "workspace.shredded" }

// AggregateType returns AggWorkspace.
func (*WorkspaceShredded) AggregateType() string { return AggWorkspace }
func (*WorkspaceShredded) isEvent()              {}

// EventType returns "workspace.configured".
func (*WorkspaceConfigured) EventType() string { return "workspace.configured" }

// AggregateType returns AggWorkspace.
func (*WorkspaceConfigured) AggregateType() string { return AggWorkspace }
func (*WorkspaceConfigured) isEvent()              {}
