// The wire contract's types (schemas/*.json), as the SDK and the client
// read and send them. Only the fields this package uses are typed; the
// service may send more.

/** A JSON value. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [key: string]: JSONValue };

/** The service's refusal: `{"ok": false, "error": {...}}`. */
export interface WireError {
  code: string;
  message: string;
  fields?: { pointer: string; message: string }[];
  retry_after?: string;
}

/** Every reply of the service. */
export interface Reply<T = unknown> {
  ok: boolean;
  result?: T;
  seq?: number;
  next?: string;
  error?: WireError;
}

/** An artifact as a result, a verdict or a dependency names it: by its SHA-256. */
export interface ArtifactRef {
  name: string;
  sha256: string;
  size?: number;
  type?: string;
}

/** A consequential model call an attempt made: counted against its goal's budget. */
export interface ModelStep {
  model: string;
  prompt_version?: string;
  tool_schema_version?: string;
  input_ref?: string;
  response_ref?: string;
  parsed?: unknown;
  validation?: string;
  tokens?: number;
  cost?: number;
}

/** A failed attempt's (or task's) error: its code and message. */
export interface ErrorInfo {
  code?: string;
  message: string;
}

/** One attempt of a task: who ran it, how it ended, what it reported. */
export interface Attempt {
  n: number;
  executor: string;
  executor_version?: string;
  operation_key: string;
  state: string; // running | succeeded | failed | abandoned | parked | cancelled
  started_at: string;
  ended_at?: string;
  deadline?: string;
  result?: unknown;
  artifacts?: ArtifactRef[];
  model_steps?: ModelStep[];
  error?: ErrorInfo;
  retryable?: boolean;
  reason?: string;
  token_hash?: string;
}

/** A verifier's verdict on an attempt's result. */
export interface Verification {
  attempt: number;
  outcome: string;
  evidence?: unknown;
  evidence_refs?: ArtifactRef[];
  verifier?: string;
  verifier_version?: string;
  result_digest?: string;
}

/** A person's decision on an approval. */
export interface ApprovalDecision {
  response: string;
  /** The branch the response took: resume, reject, fail or escalate. */
  branch?: string;
  comment?: string;
  approver: string;
  role?: string;
  decided_at: string;
}

/** An approval a task asked for: the action, its digest and, once decided, the decision. */
export interface Approval {
  id: string;
  task_id: string;
  attempt?: number;
  kind?: string;
  action: unknown;
  action_digest: string;
  summary?: string;
  role?: string;
  /** The branch taken when nobody decides in time: resume, reject, fail or escalate. */
  on_expiry?: string;
  /** The role asked after an escalation. */
  escalate_to?: string;
  /** For an approval an escalation made: the approval it escalated. */
  escalated_from?: string;
  /** The role the request was asked of: role, or for an escalation's approval the first request's. */
  asked_role?: string;
  /** How many distinct approvers must approve (absent: one). */
  quorum?: number;
  /** The approvals given while fewer than quorum had, in order; the one that makes the quorum is the decision. */
  sign_offs?: ApprovalDecision[];
  /** Sign-offs that no longer count: their approver was revoked, or registered again with another key, after signing. */
  dropped_sign_offs?: ApprovalDecision[];
  /** The identity that created the task. */
  requested_by?: string;
  /** requested_by may not approve. */
  exclude_requester?: boolean;
  /** pending, decided, expired or withdrawn. */
  state: string;
  expires_at?: string;
  decision?: ApprovalDecision;
}

/** A signal sent to a task (task.signal). */
export interface Signal {
  name: string;
  payload?: unknown;
}

/** How a task's failed attempts are retried (durations as "30s"). */
export interface RetryPolicy {
  max_attempts?: number;
  initial_backoff?: string;
  multiplier?: number;
  max_backoff?: string;
  non_retryable?: string[];
}

/** A task as a plan or task.create gives it; the service takes more fields than are typed here. */
export interface TaskSpec {
  key?: string;
  title?: string;
  queue: string;
  input?: unknown;
  depends_on?: string[];
  retry?: RetryPolicy;
  timeout?: string;
  verification?: { queue: string; on_fail?: string; on_inconclusive?: string };
  /** The task's approval settings: its gate, and the defaults of the approvals its attempts request. */
  approval?: ApprovalSpec;
  /** 1 (first) to 5 (last): the task's turn in a queue whose order is priority; absent, 3. */
  priority?: number;
  [more: string]: unknown;
}

/**
 * A task's approval settings: they gate the task on a person's decision before its first attempt, and are the
 * defaults of the approvals its attempts request (durations as "30s").
 */
export interface ApprovalSpec {
  /** Who may decide; absent: any registered approver. A request that names no role is asked of this one. */
  role?: string;
  expires_in?: string;
  responses?: string[];
  branches?: Record<string, string>;
  on_expiry?: string;
  escalate_to?: string;
  basis?: unknown;
  action_digest?: string;
}

/** What a waiting task waits for. */
export interface Wait {
  kind: string;
  signal?: string;
  until?: string;
  approval_id?: string;
  goal_id?: string;
}

/** A child goal an attempt of a task started (task.delegate), as the task keeps it. */
export interface TaskDelegation {
  key: string;
  goal_id: string;
  /** The attempt that delegated. */
  attempt: number;
  on_failure: string;
  /** open until the child goal ends, then achieved, failed or cancelled. */
  state: string;
  reason?: string;
  /** The child goal's plan when it ended. */
  tasks?: { key: string; task_id: string }[];
}

/** A task as task.get and a claim answer it. */
export interface Task {
  id: string;
  workspace: string;
  goal_id?: string;
  plan_version?: number;
  key?: string;
  /** The task's labels (task.create, task.label). */
  labels?: Record<string, string>;
  spec: TaskSpec;
  depends_on?: string[];
  state: string;
  wait?: Wait;
  attempts?: Attempt[];
  checkpoint?: unknown;
  verifications?: Verification[];
  approvals?: Approval[];
  delegations?: TaskDelegation[];
  signal?: Signal;
  reason?: string;
  error?: ErrorInfo;
  /** The parts of the task's history left out to keep it within the wire's bound, by JSON pointer. */
  omitted?: string[];
  /** A tally of the attempts the task no longer lists (it lists its latest 100). */
  earlier_attempts?: { count: number; spent?: number; tokens?: number; cost?: number; wall_ms?: number };
}

/** The accepted result and artifacts of a task another depends on. */
export interface Dependency {
  key?: string;
  task_id: string;
  result?: unknown;
  artifacts?: ArtifactRef[];
}

/** A work item on a queue (schemas/work_item.json): an attempt to run, or a result to verify. */
export interface WorkItem {
  kind: string; // execute | verify
  task_id: string;
  workspace: string;
  queue: string;
  attempt: number;
  operation_key: string;
  task?: Task;
  dependencies?: Dependency[];
  goal_id?: string;
  key?: string;
  title?: string;
  input?: unknown;
  prior_attempts?: Attempt[];
  verifications?: Verification[];
  result?: unknown;
  artifacts?: ArtifactRef[];
  result_digest?: string;
  /** The log sequence of the record that dispatched the item: read the task with Dwr-Min-Seq of it. */
  seq?: number;
}

/** What a command answers (schemas.CommandResult). */
export interface CommandResult {
  id: string;
  state?: string;
  version: number;
  attempt?: number;
  plan_version?: number;
  tasks?: { key: string; task_id: string }[];
  task?: Task;
  token_hash?: string;
  token?: string;
  approval_id?: string;
  goal_id?: string;
  queue?: string;
  lease_ms?: number;
  max_deliver?: number;
  max_running?: number;
  /** For queue.configure, queue.pause and queue.resume: at most rate_limit items handed out in any rate_period_ms. */
  rate_limit?: number;
  rate_period_ms?: number;
  /** For queue.configure, queue.pause and queue.resume: "priority" when the queue hands out its items by their tasks' priority (absent: fifo). */
  order?: string;
  /** For queue.configure, queue.pause and queue.resume: true while the queue is paused. */
  paused?: boolean;
  duplicate?: boolean;
  /** For a report that asked for it (`next: true`), the attempt its commit started for its sender: the handoff. */
  next?: Handoff;
}

/**
 * An attempt the service started for a reporting worker in its report's
 * commit, when the report asked for it (`next: true`) and left ready a task
 * that depends on the reported one, on the same queue (schemas.Handoff): no
 * work item is published for it, so no other worker sees it. The worker
 * runs it as if it had claimed it — heartbeats within the queue's lease
 * keep it; when they stop, the service abandons it (lease_lost) and the task
 * is ready again, on the queue, for any executor.
 */
export interface Handoff {
  task_id: string;
  attempt: number;
  token_hash: string;
  /** The handed attempt's token. Sent to the reporter only, never stored: keep it secret. */
  token?: string;
  /**
   * The attempt's work item, as a claim's would be (its task as the commit left it, running the attempt,
   * and its dependencies' outcomes). Absent when the task moved on before the reply was made: run nothing.
   */
  item?: WorkItem;
}

/**
 * A queue's settings as queue.configure takes them (a workspace admin's; Client.configureQueue). A field left
 * out of max_running, rate_limit and order keeps the queue's as it is.
 */
export interface ConfigureQueue {
  queue: string;
  /** How long an executor holds a job before it is delivered again, in ms; configureQueue's default 30000. */
  lease_ms?: number;
  /** How many deliveries before a work item is quarantined; configureQueue's default 5. */
  max_deliver?: number;
  /** How many of its jobs may run at once, across all its executors: 1 to 100000; -1 removes the limit. */
  max_running?: number;
  /** How many of its work items may be handed out in any rate_period_ms: 1 to 100000; -1 removes the limit. */
  rate_limit?: number;
  /** The period of rate_limit, with a rate_limit: 1000 to 86400000 ms (absent: 1000). */
  rate_period_ms?: number;
  /** The order it hands out its items in: "fifo", as they became ready, or "priority", by their tasks' priority. */
  order?: "fifo" | "priority";
  /** True: configure the queue only if it is not configured yet; otherwise keep its settings (and answer them). */
  if_unset?: boolean;
}

/**
 * A queue as queue.list lists it (schemas.Queue): its settings, and what its consumer held as the listing read
 * it.
 */
export interface Queue {
  name: string;
  lease_ms: number;
  max_deliver: number;
  /** How many of its jobs may run at once, across all its executors; absent: no limit. */
  max_running?: number;
  /** At most rate_limit items handed out in any rate_period_ms; absent: no limit. */
  rate_limit?: number;
  rate_period_ms?: number;
  /** "priority" when it hands out its items by their tasks' priority; absent: fifo. */
  order?: string;
  /** True from a queue.pause to the next queue.resume. */
  paused?: boolean;
  /** True when no queue.configure set its lease and deliveries: the defaults are in effect. */
  default_settings?: boolean;
  /** Its work items waiting to be delivered (those of a paused queue among them). */
  pending: number;
  /** Its work items delivered and not acknowledged yet. */
  in_flight: number;
  /** Its executors' pulls waiting for an item: items pending, none in flight and none waiting mean no executor takes it. */
  waiting_pulls: number;
  /** When an item of it was last delivered, if ever since its consumer was made. */
  last_delivered?: string;
  [more: string]: unknown;
}

/** A goal as goal.get answers it (its view: state, plan, tasks, spend). */
export interface Goal {
  id: string;
  workspace: string;
  title: string;
  /** The goal's labels (name: value); absent when it has none. */
  labels?: Record<string, string>;
  /** The goal's priority, 1 (first) to 5 (last); absent when none was given (3). */
  priority?: number;
  /** The caller's own name for the goal (createGoal's key); absent when it has none. */
  key?: string;
  state: string;
  reason?: string;
  plan_version?: number;
  [more: string]: unknown;
}

/** Task states. */
export const TaskState = {
  Pending: "pending",
  Ready: "ready",
  Running: "running",
  Waiting: "waiting",
  Verifying: "verifying",
  NeedsReview: "needs_review",
  Backoff: "backoff",
  Accepted: "accepted",
  Failed: "failed",
  Rejected: "rejected",
  Cancelled: "cancelled",
} as const;

/** Error codes of the service's refusals. */
export const Code = {
  Invalid: "invalid",
  NotFound: "not_found",
  Conflict: "conflict",
  Forbidden: "forbidden",
  TooLarge: "too_large",
  Unavailable: "unavailable",
  Internal: "internal",
} as const;

/** The wire's headers. */
export const Header = {
  CommandID: "Dwr-Command-Id",
  CorrelationID: "Dwr-Correlation-Id",
  MinSeq: "Dwr-Min-Seq",
  /** The log record a feed event came from (schemas.HeaderLogSeq). */
  LogSeq: "Dwr-Log-Seq",
  Upload: "Dwr-Upload",
  Chunk: "Dwr-Chunk",
  ChunkSeq: "Dwr-Chunk-Seq",
  ArtifactSize: "Dwr-Artifact-Size",
  ArtifactChunks: "Dwr-Artifact-Chunks",
  /** The W3C trace context of a request or a work item (schemas.HeaderTraceparent). */
  Traceparent: "traceparent",
  Tracestate: "tracestate",
} as const;

/** The environment variable that carries a trace context to a process (schemas.EnvTraceparent). */
export const EnvTraceparent = "TRACEPARENT";

/** A message is at most this large (the service's bound), checked before it is decoded. */
export const MaxMessageBytes = 1 << 20;

/** A result, checkpoint, action or evidence is at most this large once encoded. */
export const MaxPayloadBytes = 256 << 10;

/** The JetStream API prefix an executor account reaches JetStream through. */
export const JetStreamAPIPrefix = "dwrjs";

/** How many attempts a task has had: its listed ones and those it tallies (earlier_attempts). */
export function attemptCount(t: Task): number {
  return (t.earlier_attempts?.count ?? 0) + (t.attempts?.length ?? 0);
}

/** The states a task ends in. */
export function terminal(state: string): boolean {
  return state === "accepted" || state === "failed" || state === "rejected" || state === "cancelled";
}
