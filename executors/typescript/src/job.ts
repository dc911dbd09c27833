import { actionDigest, canonicalJSON, digestOf } from "./canonical.js";
import type { ArtifactRef, Attempt, Dependency, ModelStep, Signal, Verification } from "./wire.js";

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
  role?: string;
  decidedAt: string;
}

/** What a job asks a person to approve before it performs it. Only action is required. */
export interface ApprovalRequest {
  /** The exact action to approve: a decision authorizes only this action (its canonical digest). */
  action: unknown;
  /** One line that says what is asked. */
  summary?: string;
  /** The evidence the approver decides on. */
  basis?: unknown;
  /** The role whose approvers may decide; absent: any registered approver. */
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
}

/**
 * WaitError parks the task instead of failing it: job.sleep, job.awaitSignal
 * and job.requestApproval throw it (return or await them from the handler),
 * and the worker reports it as task.wait — or, for an approval, nothing
 * more: the request parked the attempt already.
 */
export class WaitError extends Error {
  /** A timed wait: until then. */
  readonly until?: Date;
  /** The signal waited for. */
  readonly signalName?: string;
  /** The approval asked for, once the service recorded the request. */
  readonly approvalId?: string;
  readonly actionDigest?: string;

  constructor(w: { until?: Date; signal?: string; approvalId?: string; actionDigest?: string }) {
    super(
      w.actionDigest !== undefined
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
}

/** The fields a job is built from. */
export interface JobFields {
  taskId: string;
  workspace: string;
  queue: string;
  goalId?: string;
  key?: string;
  title?: string;
  attempt: number;
  operationKey: string;
  input: unknown;
  checkpoint: unknown;
  priorAttempts: Attempt[];
  verifications: Verification[];
  signal?: Signal;
  decisions: Decision[];
  dependencies: Record<string, Dependency>;
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
  /** The verifiers' FAIL verdicts on earlier attempts, with their evidence. */
  readonly verifications!: Verification[];
  /** The last signal the task received (the one that resumed it), if any. */
  readonly signal?: Signal;
  /** The decisions taken on the task's approvals, oldest first. */
  readonly decisions!: Decision[];
  /** The accepted result and artifacts of each task this one depends on, by plan key (task id for a standalone task's). */
  readonly dependencies!: Record<string, Dependency>;
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
   * When the task holds a decision on exactly this action (by its digest),
   * it returns it: act on it. Otherwise it records the request and throws a
   * WaitError — let it propagate (`await job.requestApproval(...)`): the
   * task waits, holding no process, until someone decides, and a new attempt
   * runs, handed the decision.
   */
  async requestApproval(r: ApprovalRequest): Promise<Decision> {
    const text = JSON.stringify(r.action);
    if (text === undefined) throw new Error("dwr: the approval's action is required: the concrete action to approve");
    const canonical = canonicalJSON(text);
    const digest = digestOf(canonical);
    for (let i = this.decisions.length - 1; i >= 0; i--) {
      if (this.decisions[i]!.actionDigest === digest) return this.decisions[i]!;
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
    };
    const approvalId = await this.backend.requestApproval(body, digest);
    throw new WaitError({ approvalId, actionDigest: digest });
  }
}

export { actionDigest };
