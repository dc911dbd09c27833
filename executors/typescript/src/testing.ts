// Run a handler without a server: what an executor's author tests with.
import { createHash } from "node:crypto";
import { Job, WaitError, type Decision, type Delegated } from "./job.js";
import { runHandler } from "./report.js";
import {
  MaxPayloadBytes,
  type ArtifactRef,
  type Attempt,
  type Dependency,
  type ModelStep,
  type Signal,
  type Verification,
} from "./wire.js";
import type { Handler } from "./worker.js";

/** A decision as a test hands it: askedRole may be left out (it is then the approver's role). */
export type TestDecision = Omit<Decision, "askedRole"> & { askedRole?: string };

/** The attempt to hand the handler; every field has a default. */
export interface TestJob {
  taskId?: string; // default "01J00000000000000000000000"
  workspace?: string; // default "default"
  queue?: string; // default "test"
  goalId?: string;
  key?: string;
  title?: string;
  attempt?: number; // default 1
  operationKey?: string; // default "op-<taskId>"
  input?: unknown;
  checkpoint?: unknown;
  priorAttempts?: Attempt[];
  verifications?: Verification[];
  signal?: Signal;
  /**
   * The decisions taken on the task's approvals, oldest first: job.requestApproval returns the latest one on its
   * action, asked of its role. A decision without askedRole is taken as asked of its approver's role (what a
   * request that was not escalated records).
   */
  decisions?: TestDecision[];
  dependencies?: Record<string, Dependency>;
  /** The outcomes of the task's ended delegations, as a resumed attempt is handed them. */
  delegations?: Delegated[];
  deadline?: Date;
  /** Artifacts job.getArtifact finds, by digest (besides those the job stored). */
  artifacts?: Record<string, Uint8Array | string>;
  /** Abort it to stop the job mid-run, as a cancellation or a lost lease would (its reason is job.abort.reason). */
  abort?: AbortSignal;
}

/** What a worker would report for the job, and what the job did on the way. */
export interface Outcome {
  /** succeeded, failed (see failure.retryable) or waiting (see wait). */
  state: "succeeded" | "failed" | "waiting";
  /** The result's output, decoded, when it succeeded. */
  output?: unknown;
  artifacts?: ArtifactRef[];
  modelSteps?: ModelStep[];
  failure?: { code?: string; message: string; retryable: boolean };
  /** The wait it asked for: a time (until), a signal (signalName) or an approval (approvalId, actionDigest). */
  wait?: WaitError;
  /** Every checkpoint it saved, in order, decoded. */
  checkpoints: unknown[];
  /** Every artifact it stored, by name. */
  stored: Map<string, Uint8Array>;
  /** Every approval it asked for: the request as task.request_approval would carry it. */
  approvals: Record<string, unknown>[];
  /** Every delegation it made: the body task.delegate would carry (without task, attempt and token). */
  delegations: Record<string, unknown>[];
}

/**
 * runJob runs handler on a job built from j, without a server, and returns
 * what a worker would report — exactly: the same rules turn the handler's
 * return or throw into a success, a failure or a wait — with the
 * checkpoints, artifacts and approval requests the job made. An approval
 * request is answered with the id "<taskId>-<n>", and the job waits, as with
 * a service; hand the next run `decisions` to resume it. A delegation is
 * answered with the goal id "goal-<n>", and the job waits; hand the next run
 * `delegations` to resume it.
 */
export async function runJob(handler: Handler, j: TestJob = {}): Promise<Outcome> {
  const taskId = j.taskId ?? "01J00000000000000000000000";
  const checkpoints: unknown[] = [];
  const stored = new Map<string, Uint8Array>();
  const approvals: Record<string, unknown>[] = [];
  const delegations: Record<string, unknown>[] = [];
  const job = new Job(
    {
      taskId,
      workspace: j.workspace ?? "default",
      queue: j.queue ?? "test",
      goalId: j.goalId,
      key: j.key,
      title: j.title,
      attempt: j.attempt ?? 1,
      operationKey: j.operationKey ?? "op-" + taskId,
      input: j.input,
      checkpoint: j.checkpoint,
      priorAttempts: j.priorAttempts ?? [],
      verifications: j.verifications ?? [],
      signal: j.signal,
      decisions: (j.decisions ?? []).map((d) => ({ ...d, askedRole: d.askedRole || d.role || "" })),
      dependencies: j.dependencies ?? {},
      delegations: j.delegations ?? [],
      deadline: j.deadline,
      abort: j.abort ?? new AbortController().signal,
    },
    {
      async saveCheckpoint(data) {
        const text = JSON.stringify(data);
        if (text === undefined) throw new Error("dwr: the checkpoint does not encode to JSON");
        if (Buffer.byteLength(text) > MaxPayloadBytes) {
          throw new Error(
            `dwr: checkpoint of task ${taskId} is ${Buffer.byteLength(text)} bytes; at most ${MaxPayloadBytes} are allowed (store large state as an artifact)`,
          );
        }
        checkpoints.push(JSON.parse(text));
      },
      async putArtifact(name, bytes) {
        const data = typeof bytes === "string" ? new TextEncoder().encode(bytes) : bytes;
        stored.set(name, data);
        return { name, sha256: createHash("sha256").update(data).digest("hex"), size: data.length };
      },
      async getArtifact(sha256) {
        for (const data of stored.values()) {
          if (createHash("sha256").update(data).digest("hex") === sha256) return data;
        }
        const given = j.artifacts?.[sha256];
        if (given === undefined) throw new Error(`dwr: no artifact ${sha256} (give it in TestJob.artifacts)`);
        return typeof given === "string" ? new TextEncoder().encode(given) : given;
      },
      async requestApproval(body) {
        approvals.push(body);
        return `${taskId}-${approvals.length}`;
      },
      async delegate(body) {
        delegations.push(body);
        return `goal-${delegations.length}`;
      },
    },
  );
  const rep = await runHandler(handler, job);
  const out: Outcome = {
    state: "succeeded",
    checkpoints,
    stored,
    approvals,
    delegations,
    artifacts: rep.artifacts,
    modelSteps: rep.modelSteps,
  };
  if (rep.wait) return { ...out, state: "waiting", wait: rep.wait };
  if (rep.failure) return { ...out, state: "failed", failure: rep.failure };
  return { ...out, output: rep.output === undefined ? undefined : JSON.parse(rep.output) };
}

export { WaitError };
