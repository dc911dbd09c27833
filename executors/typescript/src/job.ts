import { actionDigest, canonicalJSON, digestOf } from "./canonical.js";
import type { ArtifactRef, Attempt, Dependency, ModelStep, Signal, TaskSpec, Verification } from "./wire.js";

/** What a successful handler returns. */
export interface Result {
  /** The task's result, encoded with JSON.stringify; at most 256 KiB (store larger outputs as artifacts). */
  output?: unknown;
  /** Artifacts of the result, as job.putArtifact returned them. */
  artifacts?: ArtifactRef[];
  /** The consequential model calls the job made (they count against the goal's budget). */
  modelSteps?: ModelStep[];
}

/** A decision a person took on one of the task's approvals, as a job is handed it. */
export interface Decision {
  approvalId: string;
  actionDigest: string;
  action?: unknown;
  /** approve | reject | revise | escalate, or "expired" when nobody decided in time. */
  response: string;
  comment?: string;
  approver?: string;
  /** The approver's role. */
  role?: string;
  decidedAt: string;
  /**
   * The role the job's request asked to decide ("" for any approver): the approval's own role, or, for an
   * approval an escalation made, the role of the request it escalated. requestApproval matches on it.
   */
  askedRole: string;
  /**
   * For an approval that needed several approvers (its quorum): every approver who approved it, in order — the
   * approver who made the quorum last. Absent otherwise.
   */
  approvers?: string[];
}

/** What a job asks a person to approve before it performs it. Only action is required. */
export interface ApprovalRequest {
  /** The exact action to approve: a decision authorizes only this action (its canonical digest). */
  action: unknown;
  /** One line that says what is asked. */
  summary?: string;
  /** The evidence the approver decides on. */
  basis?: unknown;
  /**
   * The role whose approvers may decide; absent: the role of the task's approval settings, or any registered
   * approver. A decision answers only a request of the role it was asked of.
   */
  role?: string;
  /** The responses permitted; default approve and reject. */
  responses?: string[];
  /** What follows each response: resume, reject, fail or escalate. */
  branches?: Record<string, string>;
  /** The branch taken when nobody decides within expiresInMs; default fail. */
  onExpiry?: string;
  /** The role asked after an escalation. */
  escalateTo?: string;
  /** How long the request stands, in milliseconds; absent: no expiry (or the task's approval settings). */
  expiresInMs?: number;
  /**
   * How many distinct approvers (of role) must approve before the approve branch is taken — four eyes within one
   * role; default the task's approval settings, or one; at most 10. Any other response decides at once.
   */
  quorum?: number;
  /**
   * Keep the identity that created the task from approving (separation of duties): its approval is refused and
   * another approver must. The task's approval settings may already ask it; a request cannot lift it.
   */
  excludeRequester?: boolean;
}

/** What a task does when the goal it delegated to fails or is cancelled (Delegation.onFailure). */
export const DelegationOnFailure = {
  /** Fail the task (the default). */
  Fail: "fail",
  /** Put it up for a person's review. */
  Review: "review",
  /** Run a new attempt, handed the failure (its job.delegate throws DelegationFailed). */
  Resume: "resume",
} as const;

/** Work a job hands on to a child goal: the goal and its plan (title and tasks), or the goal a ritual renders. */
export interface Delegation {
  /**
   * Names the delegation within its task: the attempt resumed after the child goal ended asks for its
   * outcome by the same key. Letters, digits, '_', '.' and '-', at most 128. A task delegates under a key
   * once; a later delegation needs another key.
   */
  key: string;
  title?: string;
  description?: string;
  successCriteria?: string[];
  /** Bounds the child goal's budget and queues; its queues stay within the delegating task's goal's. */
  envelope?: Record<string, unknown>;
  tasks?: TaskSpec[];
  /** Instead of title and tasks: a ritual (version 0 or none: the latest) run as the child goal. */
  ritual?: { name: string; version?: number; params?: unknown };
  /** The child goal's labels (with a ritual, over those of its goal template): what goals({ labels }) finds it by. */
  labels?: Record<string, string>;
  /** What the task does when the child goal fails or is cancelled: fail (the default), review or resume. */
  onFailure?: string;
}

/** The outcome of a delegation whose child goal ended. */
export interface Delegated {
  key: string;
  goalId: string;
  /** The child goal's end: achieved, failed or cancelled. */
  state: string;
  reason?: string;
  /** The accepted outcomes of the child goal's tasks, by plan key (those accepted before it failed, otherwise). */
  results: Record<string, Dependency>;
}

/**
 * DelegationFailed is what job.delegate throws for a delegation whose child
 * goal failed or was cancelled (the task resumed, by a review's retry or
 * onFailure "resume"): `delegated` says how.
 */
export class DelegationFailed extends Error {
  constructor(readonly delegated: Delegated) {
    super(
      `dwr: delegation "${delegated.key}": goal ${delegated.goalId} ${delegated.state}${delegated.reason ? ": " + delegated.reason : ""}`,
    );
    this.name = "DelegationFailed";
  }
}

const delegationKey = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/**
 * WaitError parks the task instead of failing it: job.sleep, job.awaitSignal,
 * job.requestApproval and job.delegate throw it (return or await them from
 * the handler), and the worker reports it as task.wait — or, for an approval
 * or a delegation, nothing more: the request parked the attempt already.
 */
export class WaitError extends Error {
  /** A timed wait: until then. */
  readonly until?: Date;
  /** The signal waited for. */
  readonly signalName?: string;
  /** The approval asked for, once the service recorded the request. */
  readonly approvalId?: string;
  readonly actionDigest?: string;
  /** The delegation's key, and the child goal the service created for it. */
  readonly delegationKey?: string;
  readonly goalId?: string;

  constructor(w: {
    until?: Date;
    signal?: string;
    approvalId?: string;
    actionDigest?: string;
    delegationKey?: string;
    goalId?: string;
  }) {
    super(
      w.delegationKey !== undefined
        ? `dwr: waiting for goal ${w.goalId ?? ""}, delegated as "${w.delegationKey}"`
        : w.actionDigest !== undefined
          ? `dwr: waiting for approval ${w.approvalId ?? ""} of action ${w.actionDigest}`
          : w.signal !== undefined
            ? `dwr: waiting for signal "${w.signal}"`
            : `dwr: sleeping until ${w.until?.toISOString()}`,
    );
    this.name = "WaitError";
    this.until = w.until;
    this.signalName = w.signal;
    this.approvalId = w.approvalId;
    this.actionDigest = w.actionDigest;
    this.delegationKey = w.delegationKey;
    this.goalId = w.goalId;
  }
}

/**
 * parked returns a promise rejected with w, marked handled: a handler that
 * forgets to return it leaves no unhandled rejection to end the process.
 */
function parked(w: WaitError): Promise<never> {
  const p = Promise.reject(w);
  p.catch(() => undefined);
  return p;
}

/** The worker's side of a job: the commands of its attempt. */
export interface JobBackend {
  saveCheckpoint(data: unknown, signal?: AbortSignal): Promise<void>;
  putArtifact(name: string, bytes: Uint8Array | string, signal?: AbortSignal): Promise<ArtifactRef>;
  getArtifact(sha256: string): Promise<Uint8Array>;
  requestApproval(body: Record<string, unknown>, digest: string, signal?: AbortSignal): Promise<string>;
  /** delegate records a delegation of the attempt (task.delegate, body without its task, attempt and token) and returns the child goal's id. */
  delegate(body: Record<string, unknown>, key: string): Promise<string>;
}

/** The task an attempt is of, and the attempt's number: what a job and a check (worker.ts) both name. */
export interface TaskAttempt {
  taskId: string;
  workspace: string;
  queue: string;
  goalId?: string;
  key?: string;
  title?: string;
  attempt: number;
}

/** The fields a job is built from. */
export interface JobFields extends TaskAttempt {
  operationKey: string;
  input: unknown;
  checkpoint: unknown;
  priorAttempts: Attempt[];
  omitted?: string[];
  verifications: Verification[];
  signal?: Signal;
  decisions: Decision[];
  /**
   * The role of the task's approval settings (spec.approval.role), which the service gives a request that names
   * none; absent for a task without one (and a job built without a task).
   * @internal
   */
  approvalRole?: string;
  dependencies: Record<string, Dependency>;
  delegations?: Delegated[];
  deadline?: Date;
  abort: AbortSignal;
  traceparent?: string;
}

/**
 * Job is one attempt of a task, as a handler runs it. Its abort signal
 * (`job.abort`) is aborted when the task is cancelled, the attempt loses its
 * lease, passes its deadline, or the worker stops past its drain timeout;
 * `job.abort.reason` is an AbortReason naming why (`causeOf`).
 */
export class Job implements JobFields {
  readonly taskId!: string;
  readonly workspace!: string;
  readonly queue!: string;
  readonly goalId?: string;
  readonly key?: string;
  readonly title?: string;
  /** The attempt number, from 1. */
  readonly attempt!: number;
  /** The same for every attempt of the task: the idempotency key of its side effects. */
  readonly operationKey!: string;
  /** The task's input (decoded JSON). */
  readonly input: unknown;
  /** The last checkpoint saved by any attempt of the task, or undefined. */
  readonly checkpoint: unknown;
  /** The attempts before this one (to reconcile an unknown outcome before repeating a side effect). */
  readonly priorAttempts!: Attempt[];
  /**
   * The parts of the task's history left out to keep it within the wire's bound, by JSON pointer
   * (the oldest results first: "/attempts/0/result"); empty for a task sent whole.
   */
  readonly omitted: string[];
  /** The verifiers' FAIL verdicts on earlier attempts, with their evidence. */
  readonly verifications!: Verification[];
  /** The last signal the task received (the one that resumed it), if any. */
  readonly signal?: Signal;
  /** The decisions taken on the task's approvals, oldest first. */
  readonly decisions!: Decision[];
  /** @internal */
  readonly approvalRole: string;
  /** The accepted result and artifacts of each task this one depends on, by plan key (task id for a standalone task's). */
  readonly dependencies!: Record<string, Dependency>;
  /** The outcomes of the task's delegations whose child goals have ended (see delegate). */
  readonly delegations: Delegated[];
  /** When the attempt's timeout passes, if the task has one. */
  readonly deadline?: Date;
  /** Aborted when the job must stop; its reason says why. */
  readonly abort!: AbortSignal;
  /**
   * The W3C traceparent of the trace the job's work item carries (the service's dispatch span), when the
   * service traces: every command of the job is sent in it. Hand it on so that other work joins the trace:
   * `new Client(nc, { traceparent: job.traceparent })`, or TRACEPARENT in the environment of a process the
   * job starts.
   */
  readonly traceparent?: string;

  /** The model steps recorded with recordModelStep: reported with the job's success or failure. */
  readonly modelSteps: ModelStep[] = [];

  constructor(
    fields: JobFields,
    private readonly backend: JobBackend,
  ) {
    Object.assign(this, fields);
    this.delegations = fields.delegations ?? [];
    this.omitted = fields.omitted ?? [];
    this.approvalRole = fields.approvalRole ?? "";
  }

  /** saveCheckpoint records data as the task's checkpoint: the next attempt is handed it. At most 256 KiB encoded. */
  saveCheckpoint(data: unknown): Promise<void> {
    return this.backend.saveCheckpoint(data);
  }

  /** putArtifact stores bytes as an artifact of the task and returns its reference, for Result.artifacts. */
  putArtifact(name: string, bytes: Uint8Array | string): Promise<ArtifactRef> {
    return this.backend.putArtifact(name, bytes);
  }

  /** getArtifact reads an artifact of the task's workspace by its digest, checked against it (at most 64 MiB). */
  getArtifact(sha256: string): Promise<Uint8Array> {
    return this.backend.getArtifact(sha256);
  }

  /** recordModelStep records a model call: it is reported with the job's result, or its failure. */
  recordModelStep(step: ModelStep): void {
    this.modelSteps.push(step);
  }

  /**
   * sleep parks the task until `until`, holding no process: `return
   * job.sleep(until)` after saving what the next attempt needs. The attempt
   * ends parked; a new attempt runs when the time comes, handed the last
   * checkpoint.
   */
  sleep(until: Date | number): Promise<never> {
    return parked(new WaitError({ until: new Date(until) }));
  }

  /** awaitSignal parks the task until the signal `name` arrives: `return job.awaitSignal(name)`. The resumed attempt has it in job.signal. */
  awaitSignal(name: string): Promise<never> {
    return parked(new WaitError({ signal: name }));
  }

  /** approval returns the latest decision taken on the task's approvals, or undefined. */
  approval(): Decision | undefined {
    return this.decisions.at(-1);
  }

  /**
   * requestApproval asks a person to approve r.action before the job
   * performs it; call it right before the side effect, on every attempt.
   * When the task holds a decision on exactly this action asked of this
   * role (the latest one whose action digest is actionDigest(r.action) and
   * whose askedRole is r.role, or the task's approval role when r.role is
   * absent), it returns it: act on it. A decision asked of one role never
   * stands for another's: a job that needs two sign-offs on the same action
   * asks each role in turn, and the second request, finding no decision of
   * its role, is a new approval. Otherwise it records the request and
   * throws a WaitError — let it propagate (`await job.requestApproval(...)`):
   * the task waits, holding no process, until someone decides, and a new
   * attempt runs, handed the decision, so that its request of the same
   * action and role returns it.
   */
  async requestApproval(r: ApprovalRequest): Promise<Decision> {
    const text = JSON.stringify(r.action);
    if (text === undefined) throw new Error("dwr: the approval's action is required: the concrete action to approve");
    const canonical = canonicalJSON(text);
    const digest = digestOf(canonical);
    const want = r.role || this.approvalRole;
    for (let i = this.decisions.length - 1; i >= 0; i--) {
      const d = this.decisions[i]!;
      if (d.actionDigest === digest && (d.askedRole ?? "") === want) return d;
    }
    const body: Record<string, unknown> = {
      action: JSON.parse(canonical),
      summary: r.summary,
      basis: r.basis,
      role: r.role,
      responses: r.responses,
      branches: r.branches,
      on_expiry: r.onExpiry,
      escalate_to: r.escalateTo,
      expires_in: r.expiresInMs === undefined ? undefined : r.expiresInMs / 1000,
      quorum: r.quorum,
      exclude_requester: r.excludeRequester || undefined,
    };
    const approvalId = await this.backend.requestApproval(body, digest);
    throw new WaitError({ approvalId, actionDigest: digest });
  }

  /**
   * delegate hands work on to a child goal that the service tracks for the
   * job's task; call it where the job needs the work done, on every attempt.
   * When the task's child goal under d.key has ended (job.delegations), it
   * returns its outcome: achieved, with the results of its tasks; failed or
   * cancelled, it throws DelegationFailed. Otherwise it records the
   * delegation (task.delegate) — the child goal and its plan are created,
   * linked to the task — and throws a WaitError: let it propagate (`await
   * job.delegate(...)`). The attempt is parked and the task waits, holding no
   * worker, until the child goal ends; achieved, a new attempt runs, whose
   * delegate(d) returns the children's accepted results; failed or
   * cancelled, the task fails, waits for a review, or resumes, as
   * d.onFailure says. Cancelling the task cancels the child goal. Save what
   * the next attempt needs with saveCheckpoint before delegating. A refusal
   * of the delegation as invalid (a plan the service does not take, a queue
   * the goal does not permit) is thrown as a Permanent.
   */
  async delegate(d: Delegation): Promise<Delegated> {
    if (typeof d?.key !== "string" || !delegationKey.test(d.key)) {
      throw new Error(
        `dwr: delegation of task ${this.taskId}: key ${JSON.stringify(d?.key)} is not valid: letters, digits, '_', '.' and '-', at most 128`,
      );
    }
    const done = this.delegations.find((x) => x.key === d.key);
    if (done) {
      if (done.state === "achieved") return done;
      throw new DelegationFailed(done);
    }
    const body: Record<string, unknown> = { key: d.key, on_failure: d.onFailure || undefined };
    if (d.ritual) {
      if (d.title || d.tasks) {
        throw new Error(`dwr: delegation of task ${this.taskId}: give the child goal (title, tasks) or a ritual, not both`);
      }
      body.ritual = { name: d.ritual.name, version: d.ritual.version || undefined, params: d.ritual.params, labels: d.labels };
    } else {
      body.goal = {
        title: d.title ?? "",
        description: d.description || undefined,
        success_criteria: d.successCriteria?.length ? d.successCriteria : undefined,
        envelope: d.envelope,
        labels: d.labels,
        tasks: d.tasks ?? [],
      };
    }
    const goalId = await this.backend.delegate(body, d.key);
    throw new WaitError({ delegationKey: d.key, goalId });
  }
}

export { actionDigest };
