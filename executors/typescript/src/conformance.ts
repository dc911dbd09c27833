// The TypeScript SDK's executor under the conformance suite
// (integration/conformance_test.go): it serves one queue with this package
// and does, for each task, what the scenario named in the task's input asks
// (integration/conformance/conformance.go) — as goexec does with the Go SDK.
//
// Environment (set by the suite): DWR_SERVER, DWR_CREDS, CONFORMANCE_QUEUE,
// CONFORMANCE_ROLE (worker or verifier), CONFORMANCE_LEASE_MS,
// CONFORMANCE_OBSERVE (a file to append observations to, one JSON object a
// line) and CONFORMANCE_DIR (where the suite leaves release files).
import { appendFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import {
  Permanent,
  Verifier,
  Worker,
  causeOf,
  credentialOptions,
  type Check,
  type Job,
  type Result,
  type Verdict,
} from "./index.js";
import { runProgram, runUntilStopped } from "./program.js";

interface Env {
  server: string;
  creds: string;
  queue: string;
  role: string;
  leaseMs: number;
  observations: string;
  dir: string;
}

interface Input {
  scenario: string;
  value?: unknown;
  fail_times?: number;
  message?: string;
  millis?: number;
  name?: string;
  action?: unknown;
  role?: string;
  roles?: string[];
  quorum?: number;
  exclude_requester?: boolean;
  content?: string;
  model?: string;
  prompt_version?: string;
  tokens?: number;
  verdicts?: string[];
}

function fromEnv(): Env {
  const v = (k: string) => process.env[k] ?? "";
  const e: Env = {
    server: v("DWR_SERVER"),
    creds: v("DWR_CREDS"),
    queue: v("CONFORMANCE_QUEUE"),
    role: v("CONFORMANCE_ROLE") || "worker",
    leaseMs: Number.parseInt(v("CONFORMANCE_LEASE_MS"), 10),
    observations: v("CONFORMANCE_OBSERVE"),
    dir: v("CONFORMANCE_DIR"),
  };
  if (!Number.isFinite(e.leaseMs)) throw new Error("CONFORMANCE_LEASE_MS: not a number");
  for (const [k, val] of Object.entries({
    DWR_SERVER: e.server,
    DWR_CREDS: e.creds,
    CONFORMANCE_QUEUE: e.queue,
    CONFORMANCE_OBSERVE: e.observations,
    CONFORMANCE_DIR: e.dir,
  })) {
    if (!val) throw new Error(k + " is not set");
  }
  return e;
}

/** observe appends one observation (one write of one line). */
function observe(env: Env, job: Job, event: string, detail?: unknown) {
  const o: Record<string, unknown> = { task_id: job.taskId, attempt: job.attempt, event };
  if (detail !== undefined) o.detail = detail;
  try {
    appendFileSync(env.observations, JSON.stringify(o) + "\n", { mode: 0o600 });
  } catch (e) {
    console.error("conformance: observe:", (e as Error).message);
  }
}

const released = (env: Env, taskId: string) => existsSync(join(env.dir, "release-" + taskId));

/** stopped waits until the job's abort signal fires, and returns the cause's name. */
function stopped(job: Job): Promise<string> {
  const name = () => causeOf(job.abort.reason) ?? String(job.abort.reason);
  if (job.abort.aborted) return Promise.resolve(name());
  return new Promise((resolve) => job.abort.addEventListener("abort", () => resolve(name()), { once: true }));
}

function handler(env: Env) {
  return async (job: Job): Promise<Result> => {
    const input = job.input as Input;
    if (typeof input !== "object" || input === null) throw new Permanent("the input is not an object");
    const done: Record<string, unknown> = { attempt: job.attempt, operation_key: job.operationKey };
    switch (input.scenario) {
      case "succeed":
        done.value = input.value;
        return { output: done };

      case "retry":
        if (job.attempt <= (input.fail_times ?? 0)) throw new Error(`transient failure ${job.attempt}`);
        return { output: done };

      case "permanent":
        throw new Permanent(input.message ?? "permanent");

      case "outlive_lease": {
        const ms = input.millis ?? 0;
        await new Promise<void>((resolve, reject) => {
          const t = setTimeout(resolve, ms);
          job.abort.addEventListener("abort", () => (clearTimeout(t), reject(job.abort.reason)), { once: true });
        });
        return { output: done };
      }

      case "checkpoint_resume":
        if (job.checkpoint !== undefined && job.checkpoint !== null) {
          done.resumed_from = job.checkpoint;
          return { output: done };
        }
        await job.saveCheckpoint({ step: 1, attempt: job.attempt });
        observe(env, job, "started");
        await stopped(job); // the suite kills the process here
        throw job.abort.reason;

      case "fencing": {
        // Save a checkpoint first: the attempt is claimed, so its token is what a later report carries.
        await job.saveCheckpoint({ holder: job.attempt });
        observe(env, job, "started");
        while (!released(env, job.taskId)) {
          if (job.abort.aborted) {
            observe(env, job, "stopped", causeOf(job.abort.reason) ?? String(job.abort.reason));
            throw job.abort.reason;
          }
          await new Promise((r) => setTimeout(r, 20));
        }
        observe(env, job, "released");
        return { output: done };
      }

      case "cancel": {
        await job.saveCheckpoint({ running: job.attempt });
        observe(env, job, "started");
        const why = await stopped(job);
        observe(env, job, "stopped", why);
        throw job.abort.reason;
      }

      case "sleep":
        if (job.checkpoint === undefined || job.checkpoint === null) {
          const until = new Date(Date.now() + (input.millis ?? 0));
          await job.saveCheckpoint({ until: until.toISOString() });
          return job.sleep(until);
        }
        done.woke_at = new Date().toISOString();
        return { output: done };

      case "signal":
        if (!job.signal) return job.awaitSignal(input.name ?? "");
        done.signal = job.signal.payload;
        return { output: done };

      case "approval": {
        const d = await job.requestApproval({ action: input.action, summary: "conformance", role: input.role });
        done.response = d.response;
        done.approver = d.approver;
        done.action_digest = d.actionDigest;
        return { output: done };
      }

      case "four_eyes":
      case "not_by_requester": {
        const d = await job.requestApproval({
          action: input.action,
          summary: "conformance: four eyes",
          role: input.role,
          quorum: input.quorum,
          excludeRequester: input.exclude_requester,
        });
        if (d.response !== "approve") throw new Permanent(`${input.role}: ${d.response}`);
        done.approvers = d.approvers;
        done.approver = d.approver;
        return { output: done };
      }

      case "two_approvals": {
        const by: string[] = [];
        for (const role of input.roles ?? []) {
          const d = await job.requestApproval({ action: input.action, summary: `conformance: ${role}`, role });
          if (d.response !== "approve") throw new Permanent(`${role}: ${d.response}`);
          by.push(d.approver ?? "");
        }
        done.approvers = by;
        return { output: done };
      }

      case "artifact": {
        const a = await job.putArtifact(input.name ?? "artifact", input.content ?? "");
        return { output: done, artifacts: [a] };
      }

      case "model_step":
        return {
          output: done,
          modelSteps: [{ model: input.model ?? "", prompt_version: input.prompt_version, tokens: input.tokens }],
        };

      case "verified":
        done.verdicts = input.verdicts;
        return { output: done };
    }
    throw new Permanent(`unknown scenario "${input.scenario}"`);
  };
}

/** verify judges a result by the verdict it carries for its attempt. */
function verify(c: Check): Verdict {
  const r = c.result as { attempt?: number; verdicts?: string[] };
  const n = r?.attempt ?? 0;
  const vs = r?.verdicts ?? [];
  const outcome = (n >= 1 && n <= vs.length ? vs[n - 1] : "PASS") as Verdict["outcome"];
  return { outcome, evidence: { checked: String(n) } };
}

async function main() {
  const env = fromEnv();
  const nc = await connect({ servers: env.server, name: "tsexec", maxReconnectAttempts: -1, ...credentialOptions(env.creds) });
  const opts = { nc, queue: env.queue, leaseMs: env.leaseMs, executor: "tsexec", concurrency: 4, logger: console };
  const w = env.role === "verifier" ? new Verifier(opts, verify) : new Worker(opts, handler(env));
  await runUntilStopped(w, nc);
}

runProgram("tsexec", main);
