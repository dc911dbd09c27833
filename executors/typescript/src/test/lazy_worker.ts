// A worker for the Go-driven tests of the lazy claim and of trace
// propagation (integration/typescript_lazy_test.go): it serves one queue and
// does, for each task, what the task's input names, writing one JSON line
// per thing it saw to stdout ({"task_id", "event", "detail"}).
//
// Environment: DWR_SERVER, DWR_CREDS, LAZY_QUEUE, LAZY_EXECUTOR, LAZY_LEASE_MS
// and LAZY_DIR (where the test leaves release files). With LAZY_VERIFY=1 it
// is a verifier of LAZY_QUEUE instead: it passes a result that starts with
// its input's secret (a "join" task's, opened), and fails any other.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { connect } from "@nats-io/transport-node";
import {
  Client,
  DelegationFailed,
  Verifier,
  DelegationOnFailure,
  Worker,
  causeOf,
  credentialOptions,
  type Check,
  type Job,
  type Logger,
  type Result,
  type Verdict,
} from "../index.js";
import { needEnv, runProgram, runUntilStopped } from "../program.js";

interface Input {
  scenario: string;
  millis?: number;
  secret?: string;
}

const need = (name: string) => needEnv("lazy_worker", name);

const dir = need("LAZY_DIR");
const executor = need("LAZY_EXECUTOR");

function say(job: Job | undefined, event: string, detail?: unknown) {
  process.stdout.write(JSON.stringify({ task_id: job?.taskId ?? "", event, detail }) + "\n");
}

/** The worker's log lines, as events "log" (the job lines name their task and outcome). */
const line = (msg: string, ...args: unknown[]) => say(undefined, "log", [msg, ...args.map(String)].join(" "));
const logger: Logger = { debug: (msg, ...args) => console.error(msg, ...args), info: line, warn: line, error: line };

/** until waits until the job is aborted (returning its cause) or the test releases it (returning ""). */
async function until(job: Job): Promise<string> {
  while (!existsSync(join(dir, "release-" + job.taskId))) {
    if (job.abort.aborted) return causeOf(job.abort.reason) ?? String(job.abort.reason);
    await new Promise((r) => setTimeout(r, 20));
  }
  return "";
}

function handler(nc: Awaited<ReturnType<typeof connect>>) {
  return async (job: Job): Promise<Result> => {
    const input = job.input as Input;
    say(job, "started", { traceparent: job.traceparent ?? "" });
    switch (input.scenario) {
      case "quick":
        return { output: { done: true } };
      case "fail":
        throw new Error("failed on purpose");
      case "run":
        // Runs for millis (past heartbeats), then succeeds.
        await new Promise((r) => setTimeout(r, input.millis ?? 0));
        return { output: { ran: input.millis } };
      case "checkpoint":
        // Saves a checkpoint, then runs for millis.
        await job.saveCheckpoint({ step: 1 });
        await new Promise((r) => setTimeout(r, input.millis ?? 0));
        return { output: { saved: true } };
      case "hold": {
        // Holds until released or aborted; says which.
        const why = await until(job);
        say(job, why ? "aborted" : "released", why);
        if (why) throw job.abort.reason;
        return { output: { by: executor } };
      }
      case "hang_once":
        // The executor named "stale" holds (as "hold"); any other succeeds at once.
        if (executor === "stale") {
          const why = await until(job);
          say(job, why ? "aborted" : "released", why);
          if (why) throw job.abort.reason;
        }
        return { output: { by: executor } };
      case "delegate": {
        // Hands a task like "quick" on to a child goal; the resumed attempt returns its result.
        const d = await job.delegate({
          key: "child",
          title: "child work",
          tasks: [{ key: "c1", queue: job.queue, input: { scenario: "quick" } }],
        });
        return { output: { child: d.results.c1?.result, goal: d.goalId, attempt: job.attempt } };
      }
      case "delegate_failing":
        // Hands on a task that fails; resumed, the attempt falls back.
        try {
          await job.delegate({
            key: "broken",
            title: "failing child",
            onFailure: DelegationOnFailure.Resume,
            tasks: [{ key: "c1", queue: job.queue, input: { scenario: "fail" }, retry: { max_attempts: 1 } }],
          });
        } catch (e) {
          if (!(e instanceof DelegationFailed)) throw e;
          return { output: { fallback: e.delegated.state, goal: e.delegated.goalId } };
        }
        throw new Error("the failing child goal was achieved");
      case "join":
        // Its secret joined with its dependencies' results (a chain's last: "c+b+a").
        return { output: [input.secret, ...Object.values(job.dependencies).map((d) => d.result)].join("+") };
      case "client": {
        // The job's trace handed on to a client of its own.
        const c = new Client(nc, { traceparent: job.traceparent });
        const t = await c.task(job.taskId);
        return { output: { read: t.id } };
      }
    }
    throw new Error(`unknown scenario "${input.scenario}"`);
  };
}

/** judge passes a result joined from the opened input's secret; a sealed value fails it. */
function judge(check: Check): Verdict {
  const secret = (check.input as Input | undefined)?.secret;
  const ok =
    typeof secret === "string" &&
    secret.startsWith("secret-") &&
    typeof check.result === "string" &&
    check.result.startsWith(secret + "+secret-");
  say(undefined, "judged", { task_id: check.taskId, ok });
  return ok ? { outcome: "PASS" } : { outcome: "FAIL", evidence: { input: check.input, result: check.result } };
}

async function main() {
  const creds = process.env.DWR_CREDS ?? "";
  const nc = await connect({
    servers: need("DWR_SERVER"),
    name: executor,
    maxReconnectAttempts: -1,
    ...(creds ? credentialOptions(creds) : {}),
  });
  const opts = {
    nc,
    queue: need("LAZY_QUEUE"),
    executor,
    version: "test-1",
    leaseMs: Number(need("LAZY_LEASE_MS")),
    concurrency: 4,
    drainTimeoutMs: 1000,
    logger,
  };
  const w = process.env.LAZY_VERIFY === "1" ? new Verifier(opts, judge) : new Worker(opts, handler(nc));
  await runUntilStopped(w, nc);
}

runProgram("lazy_worker", main);
