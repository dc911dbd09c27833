import { hostname } from "node:os";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { jetstream, type Consumer, type ConsumerMessages, type JsMsg } from "@nats-io/jetstream";
import { getArtifact, putArtifact, refOf } from "./artifacts.js";
import { AbortReason, Cause, DwrError, Failure, Permanent, cancelled, causeOf, leaseLost, stopping, timedOut } from "./errors.js";
import { Job, WaitError, type Decision, type JobBackend, type Result } from "./job.js";
import { Service, sleep } from "./service.js";
import {
  JetStreamAPIPrefix,
  MaxMessageBytes,
  MaxPayloadBytes,
  terminal,
  type ArtifactRef,
  type Attempt,
  type CommandResult,
  type Dependency,
  type ModelStep,
  type Reply,
  type Task,
  type Verification,
  type WorkItem,
} from "./wire.js";

/** The shortest lease a worker accepts. */
export const MinLeaseMs = 1000;

/** A logger: console fits. */
export interface Logger {
  debug(msg: string, ...args: unknown[]): void;
  info(msg: string, ...args: unknown[]): void;
  warn(msg: string, ...args: unknown[]): void;
  error(msg: string, ...args: unknown[]): void;
}

const silent: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/** WorkerOptions configures a Worker or a Verifier. Every field but nc and queue has a default. */
export interface WorkerOptions {
  /** The NATS connection to the dwr service (connect with credentialOptions, and reconnect forever). */
  nc: NatsConnection;
  /** The work queue to take items from (a task spec's queue). */
  queue: string;
  /** The workspace the work belongs to; default "default". */
  workspace?: string;
  /** The first token of every subject; default "dwr". */
  prefix?: string;
  /** Names this worker in the attempts it starts; default "<hostname>-<pid>". */
  executor?: string;
  /** The executor's version, recorded with every attempt. */
  version?: string;
  /** How many jobs run at once; default 1. */
  concurrency?: number;
  /** The lease of a work item, renewed every lease/3 while a job runs; default 30 s, at least 1 s. The queue's lease, if it has one, wins (see reconfigure). */
  leaseMs?: number;
  /** How many deliveries before the service quarantines an item; default 5. */
  maxDeliver?: number;
  /** Make this worker's leaseMs and maxDeliver the queue's. */
  reconfigure?: boolean;
  /** How long stop() lets running jobs finish before aborting them (their items are then redelivered); default 30 s. */
  drainTimeoutMs?: number;
  /** Receives the worker's logs; default: none. */
  logger?: Logger;
}

/** A handler runs one job and returns its result; throwing fails the attempt (retried unless Permanent). */
export type Handler = (job: Job) => Promise<Result | void> | Result | void;

/** A result to judge: what a verifier receives. */
export interface Check {
  taskId: string;
  workspace: string;
  queue: string;
  goalId?: string;
  key?: string;
  title?: string;
  /** The attempt whose result is judged. */
  attempt: number;
  input: unknown;
  result: unknown;
  artifacts: ArtifactRef[];
  resultDigest: string;
  priorAttempts: Attempt[];
  verifications: Verification[];
  /** Aborted when the verifier stops past its drain timeout. */
  abort: AbortSignal;
  /** getArtifact reads one of the workspace's artifacts by its digest, checked. */
  getArtifact(sha256: string): Promise<Uint8Array>;
}

/** A verifier's judgment. */
export interface Verdict {
  outcome: "PASS" | "FAIL" | "INCONCLUSIVE";
  /** Encoded with JSON.stringify; at most 256 KiB. */
  evidence?: unknown;
  evidenceRefs?: ArtifactRef[];
}

/** A verify handler judges a result; throwing leaves the item to be delivered again. */
export type VerifyHandler = (check: Check) => Promise<Verdict> | Verdict;

const nameRe = /^[a-z0-9][a-z0-9_-]{0,62}$/;
const maxLabel = 200;
const maxMessage = 10000;
const maxCode = 200;
const fetchWindowMs = 15000;
const viewLagMs = 5000;
const supersedeTries = 3;
const endingEvents = ["cancelled", "failed", "rejected", "attempt_abandoned", "attempt_failed"] as const;

/** Error codes the SDK reports on its own. */
export const SDKCode = {
  Timeout: "timeout",
  InvalidResult: "invalid_result",
  Dependencies: "dependencies_unavailable",
} as const;

interface Config {
  nc: NatsConnection;
  queue: string;
  workspace: string;
  prefix: string;
  executor: string;
  version: string;
  concurrency: number;
  leaseMs: number;
  maxDeliver: number;
  reconfigure: boolean;
  drainTimeoutMs: number;
  log: Logger;
}

function configOf(o: WorkerOptions): Config {
  const c: Config = {
    nc: o.nc,
    queue: o.queue,
    workspace: o.workspace ?? "default",
    prefix: o.prefix ?? "dwr",
    executor: o.executor ?? `${hostname() || "executor"}-${process.pid}`,
    version: o.version ?? "",
    concurrency: o.concurrency ?? 1,
    leaseMs: o.leaseMs ?? 30000,
    maxDeliver: o.maxDeliver ?? 5,
    reconfigure: o.reconfigure ?? false,
    drainTimeoutMs: o.drainTimeoutMs ?? 30000,
    log: o.logger ?? silent,
  };
  const bad: string[] = [];
  if (!c.nc) bad.push("nc is required");
  if (!c.queue) bad.push("queue is required");
  else if (!nameRe.test(c.queue)) bad.push(`queue "${c.queue}" is not a valid name (lower-case letters, digits, '-' and '_', at most 63)`);
  if (!nameRe.test(c.workspace)) bad.push(`workspace "${c.workspace}" is not a valid name (lower-case letters, digits, '-' and '_', at most 63)`);
  if (!nameRe.test(c.prefix)) bad.push(`prefix "${c.prefix}" is not a valid subject token`);
  if (c.executor.trim() === "" || Buffer.byteLength(c.executor) > maxLabel) bad.push(`executor "${c.executor}" must be 1 to ${maxLabel} bytes`);
  if (Buffer.byteLength(c.version) > maxLabel) bad.push(`version is more than ${maxLabel} bytes`);
  if (!Number.isInteger(c.concurrency) || c.concurrency < 1) bad.push(`concurrency ${c.concurrency} must be an integer of at least 1`);
  if (!(c.leaseMs >= MinLeaseMs)) bad.push(`leaseMs ${c.leaseMs} must be at least ${MinLeaseMs}`);
  if (!Number.isInteger(c.maxDeliver) || c.maxDeliver < 1) bad.push(`maxDeliver ${c.maxDeliver} must be an integer of at least 1`);
  if (!(c.drainTimeoutMs >= 0)) bad.push(`drainTimeoutMs ${c.drainTimeoutMs} must not be negative`);
  if (bad.length > 0) throw new Error("dwr: invalid worker options: " + bad.join("; "));
  return c;
}

/**
 * Worker takes work items from one queue and runs a handler for each, at
 * most `concurrency` at once: it claims each attempt before its handler
 * starts (task.claim), keeps its lease (an in-progress ack and a
 * task.heartbeat every lease/3), stops the handler (job.abort) when the task
 * is cancelled or the attempt loses its lease, and reports the outcome
 * (task.succeed, task.fail, task.wait) with its own command id, sent again
 * with that id until answered; it acknowledges the item once the report is
 * answered.
 *
 *     const w = new Worker({ nc, queue: "payments", concurrency: 8 }, async (job) => {
 *       const receipt = await pay(job.input, job.operationKey);
 *       return { output: receipt };
 *     });
 *     await w.run(); // until w.stop(), which drains
 */
export class Worker {
  protected readonly cfg: Config;
  protected readonly svc: Service;
  private readonly handler?: Handler;
  private readonly verifier?: VerifyHandler;
  private leaseMs: number;
  private running = 0;
  private slotFreed?: () => void;
  private readonly jobs = new Set<Promise<void>>();
  private readonly stopCtl = new AbortController(); // stop(): no more fetching
  private readonly hardCtl = new AbortController(); // the drain timeout passed: jobs and reports end
  private fetching?: ConsumerMessages;
  private started = false;
  private done?: Promise<void>;
  private readonly watchers = new Map<string, Set<Watch>>();
  private readonly subs: Subscription[] = [];

  constructor(opts: WorkerOptions, handler: Handler);
  /** @internal */
  constructor(opts: WorkerOptions, handler: undefined, verifier: VerifyHandler);
  constructor(opts: WorkerOptions, handler?: Handler, verifier?: VerifyHandler) {
    this.cfg = configOf(opts);
    if (!handler && !verifier) throw new Error("dwr: the handler is required");
    this.handler = handler;
    this.verifier = verifier;
    this.leaseMs = this.cfg.leaseMs;
    this.svc = new Service(this.cfg.nc, this.cfg.workspace, this.cfg.prefix);
  }

  /** The queue's lease in force, in milliseconds. */
  get lease(): number {
    return this.leaseMs;
  }

  /**
   * run takes work items and runs jobs until stop() is called (or signal
   * aborts), then drains: it stops fetching, lets the running jobs finish
   * and report for up to drainTimeoutMs, then aborts the rest (reason
   * Cause.Stopping) and leaves their items unacknowledged, to be
   * redelivered. It rides out service restarts, retrying with backoff; it
   * returns once drained, and throws when the connection is closed for good.
   */
  run(opts: { signal?: AbortSignal } = {}): Promise<void> {
    if (this.started) throw new Error("dwr: the worker was already run");
    this.started = true;
    opts.signal?.addEventListener("abort", () => void this.stop(), { once: true });
    this.done = this.loop();
    return this.done;
  }

  /** stop stops fetching and drains (see run); it resolves once the worker has stopped. */
  async stop(): Promise<void> {
    if (!this.stopCtl.signal.aborted) {
      this.stopCtl.abort(stopping());
      this.fetching?.stop();
      this.slotFreed?.();
    }
    await this.done;
  }

  private async loop(): Promise<void> {
    const log = this.cfg.log;
    try {
      await this.watch();
    } catch (err) {
      log.warn("dwr: cannot watch the tasks' events; cancellation reaches a job only through refused commands", err);
    }
    log.info(`dwr: worker ${this.cfg.executor} started on queue ${this.cfg.queue} (concurrency ${this.cfg.concurrency})`);
    let err: unknown;
    try {
      await this.fetchLoop();
    } catch (e) {
      err = e;
    }
    // Drain.
    const drained = Promise.all([...this.jobs]).then(() => true);
    const timer = sleep(this.cfg.drainTimeoutMs, this.hardCtl.signal).then(() => false);
    if (!(await Promise.race([drained, timer]))) {
      log.warn("dwr: drain timeout passed; aborting the running jobs, their work items will be redelivered");
      this.hardCtl.abort(stopping());
      await drained;
    }
    this.hardCtl.abort(stopping()); // ends the drain timer
    for (const s of this.subs) s.unsubscribe();
    log.info("dwr: worker stopped");
    if (err) throw err;
  }

  private async fetchLoop(): Promise<void> {
    const stop = this.stopCtl.signal;
    let cons: Consumer | undefined;
    let wait = 100;
    const pause = async (what: string, err: unknown) => {
      this.cfg.log.warn(`dwr: could not ${what}; retrying in ${wait} ms:`, err instanceof Error ? err.message : err);
      await sleep(wait, stop);
      wait = Math.min(2 * wait, 5000);
    };
    while (!stop.aborted) {
      if (this.cfg.nc.isClosed()) throw new Error("dwr: the NATS connection is closed");
      if (!cons) {
        try {
          cons = await this.consumer();
          wait = 100;
        } catch (e) {
          await pause(`bind the consumer of queue ${this.cfg.queue}`, e);
          continue;
        }
      }
      const n = await this.slots();
      if (n === 0) break;
      let got = 0;
      try {
        const batch = await cons.fetch({ max_messages: n, expires: fetchWindowMs });
        this.fetching = batch;
        if (stop.aborted) batch.stop();
        for await (const m of batch) {
          got++;
          if (stop.aborted) {
            m.nak(); // stopping: straight back, for another worker
            continue;
          }
          this.running++;
          const p: Promise<void> = this.deliver(m)
            .catch((e) => this.cfg.log.error("dwr: a delivery failed:", e))
            .finally(() => {
              this.running--;
              this.jobs.delete(p);
              this.slotFreed?.();
            });
          this.jobs.add(p);
        }
        this.fetching = undefined;
        wait = 100;
      } catch (e) {
        this.fetching = undefined;
        if (stop.aborted) break;
        cons = undefined;
        await pause("fetch work items", e);
      }
      void got;
    }
  }

  /** slots waits until at least one slot is free and returns how many are, or 0 once stopping. */
  private async slots(): Promise<number> {
    while (this.running >= this.cfg.concurrency && !this.stopCtl.signal.aborted) {
      await new Promise<void>((resolve) => (this.slotFreed = resolve));
      this.slotFreed = undefined;
    }
    return this.stopCtl.signal.aborted ? 0 : this.cfg.concurrency - this.running;
  }

  /**
   * consumer asks the service for the queue's settings (queue.configure:
   * this worker's lease and max deliveries when the queue has none yet),
   * which creates its consumer, and binds to it through the JetStream API
   * prefix an executor account is given.
   */
  private async consumer(): Promise<Consumer> {
    const c = this.cfg;
    const r = await this.svc.command<CommandResult>(
      "queue.configure",
      { queue: c.queue, lease_ms: c.leaseMs, max_deliver: c.maxDeliver, if_unset: !c.reconfigure },
      { signal: this.stopCtl.signal },
    );
    if (!r.ok) throw new DwrError(r.error!, "queue.configure");
    const got = r.result!;
    const lease = got.lease_ms ?? c.leaseMs;
    if (lease !== c.leaseMs || got.max_deliver !== c.maxDeliver) {
      c.log.warn(
        `dwr: queue ${c.queue} has other settings than this worker's (lease ${lease} ms, max_deliver ${got.max_deliver}); using the queue's (reconfigure: true changes them)`,
      );
    }
    this.leaseMs = Math.max(lease, MinLeaseMs);
    const stream = c.prefix.toUpperCase() + "_WORK";
    const name = `${c.prefix}-${c.workspace}-${c.queue}`;
    const errs: unknown[] = [];
    for (const apiPrefix of [JetStreamAPIPrefix, undefined]) {
      try {
        const js = jetstream(c.nc, apiPrefix ? { apiPrefix, timeout: 5000 } : { timeout: 5000 });
        const cons = await js.consumers.get(stream, name);
        c.log.info(`dwr: taking work from queue ${c.queue} (lease ${this.leaseMs} ms)`);
        return cons;
      } catch (e) {
        errs.push(e);
      }
    }
    throw new Error(`dwr: no JetStream API serves the consumer ${name}: ${errs.map((e) => (e as Error).message).join("; ")}`);
  }

  /** watch subscribes to the events that end attempts, once per event name, and routes them to the jobs. */
  private async watch(): Promise<void> {
    const prefix = `${this.cfg.prefix}.ev.${this.cfg.workspace}.task.`;
    for (const name of endingEvents) {
      const sub = this.cfg.nc.subscribe(prefix + "*." + name, {
        callback: (err, m) => {
          if (err || m.data.length > MaxMessageBytes) return;
          const taskId = m.subject.slice(prefix.length, m.subject.length - name.length - 1);
          const targets = this.watchers.get(taskId);
          if (!targets) return;
          if (name === "cancelled" || name === "failed" || name === "rejected") {
            for (const w of targets) w.end();
            return;
          }
          let attempt = 0;
          try {
            attempt = Number((JSON.parse(m.string()) as { data?: { attempt?: number } }).data?.attempt ?? 0);
          } catch {
            return;
          }
          if (!attempt) return;
          for (const w of targets) w.endAttempt(attempt, name === "attempt_failed" ? timedOut() : leaseLost());
        },
      });
      this.subs.push(sub);
    }
    await this.cfg.nc.flush(); // in place before the first job starts
  }

  private newWatch(taskId: string): Watch {
    const w = new Watch(() => {
      const set = this.watchers.get(taskId);
      set?.delete(w);
      if (set?.size === 0) this.watchers.delete(taskId);
    });
    let set = this.watchers.get(taskId);
    if (!set) this.watchers.set(taskId, (set = new Set()));
    set.add(w);
    return w;
  }

  /** deliver handles one work item: claim, run, report, acknowledge. */
  private async deliver(msg: JsMsg): Promise<void> {
    const d = new Delivery(this, this.cfg, this.svc, msg, this.hardCtl.signal);
    if (msg.data.length > MaxMessageBytes) {
      this.cfg.log.error(`dwr: a work item of ${msg.data.length} bytes, more than ${MaxMessageBytes}; handing it back`);
      msg.nak(this.leaseMs);
      return;
    }
    let item: WorkItem;
    try {
      item = JSON.parse(new TextDecoder().decode(msg.data)) as WorkItem;
      checkItem(item, this.cfg, this.verifier ? "verify" : "execute");
    } catch (e) {
      // An item this worker cannot run: back for one that can, and past
      // MaxDeliver to the service's quarantine, which fails its task.
      this.cfg.log.error("dwr: a work item this worker cannot run; handing it back:", (e as Error).message);
      msg.nak(this.leaseMs);
      return;
    }
    d.item = item;
    if (new TextDecoder().decode(msg.data).includes("dwr:sealed:1:")) {
      // Sealed payloads: read them opened from the service.
      d.sealed = true;
      item.task = undefined;
      item.dependencies = undefined;
    }
    if (this.verifier) return d.judge(this.verifier);
    const watch = this.newWatch(item.task_id);
    try {
      await d.execute(this.handler!, watch);
    } finally {
      watch.stop();
    }
  }
}

/**
 * Verifier judges results on a verification queue: items are not claimed;
 * its verdict is recorded with task.verify, under the identity of the task,
 * the attempt, the result's digest and this verifier's name and version.
 *
 *     const v = new Verifier({ nc, queue: "checks", executor: "title-check" }, (check) =>
 *       ({ outcome: "FAIL", evidence: { missing: "a title" } }));
 */
export class Verifier extends Worker {
  constructor(opts: WorkerOptions, verify: VerifyHandler) {
    if (typeof verify !== "function") throw new Error("dwr: the verify handler is required");
    super(opts, undefined, verify);
  }
}

/** checkItem throws when the item is not one this worker may run. */
function checkItem(it: WorkItem, c: Config, kind: string) {
  if (typeof it !== "object" || it === null) throw new Error("the item is not a JSON object");
  if (it.kind !== kind) throw new Error(`an item of kind "${it.kind}"; this worker runs "${kind}" items`);
  if (typeof it.task_id !== "string" || it.task_id === "" || it.task_id.length > 64 || /[.*> ]/.test(it.task_id)) {
    throw new Error("/task_id: not a task id");
  }
  if (it.workspace !== c.workspace || it.queue !== c.queue) {
    throw new Error(`an item of ${it.workspace}/${it.queue}; this worker serves ${c.workspace}/${c.queue}`);
  }
  if (!Number.isInteger(it.attempt) || it.attempt < 1) throw new Error("/attempt: must be a positive integer");
}

/** Watch follows a task's ending events while its item is held, and aborts the job when one ends its attempt. */
class Watch {
  attempt = 0;
  private ctl?: AbortController;
  ended = false;
  private readonly lost = new Map<number, AbortReason>();

  constructor(readonly stop: () => void) {}

  bind(attempt: number, ctl: AbortController) {
    this.attempt = attempt;
    this.ctl = ctl;
    if (this.ended) ctl.abort(cancelled());
    else if (this.lost.has(attempt)) ctl.abort(this.lost.get(attempt));
  }

  end() {
    this.ended = true;
    this.ctl?.abort(cancelled());
  }

  endAttempt(n: number, why: AbortReason) {
    if (!this.lost.has(n)) this.lost.set(n, why);
    if (this.ctl && this.attempt === n) this.ctl.abort(why);
  }
}

/** running returns the attempt that holds the task now, or undefined. */
function running(t: Task): Attempt | undefined {
  if (t.state !== "running") return undefined;
  return t.attempts?.findLast((a) => a.state === "running");
}

/**
 * runningFromItem returns the running attempt when it was started from the
 * item whose first claim starts itemAttempt (by its first delivery, or by a
 * redelivery that superseded an earlier one).
 */
function runningFromItem(t: Task, itemAttempt: number): Attempt | undefined {
  const r = running(t);
  if (!r || r.n < itemAttempt) return undefined;
  for (const a of t.attempts ?? []) {
    if (a.n >= itemAttempt && a.n < r.n && a.state !== "abandoned") return undefined;
  }
  return r;
}

function decisionsOf(t: Task): Decision[] {
  const out: Decision[] = [];
  for (const a of t.approvals ?? []) {
    if (a.decision) {
      out.push({
        approvalId: a.id,
        actionDigest: a.action_digest,
        action: a.action,
        response: a.decision.response,
        comment: a.decision.comment,
        approver: a.decision.approver,
        role: a.decision.role,
        decidedAt: a.decision.decided_at,
      });
    } else if (a.state === "expired" && a.expires_at) {
      out.push({ approvalId: a.id, actionDigest: a.action_digest, action: a.action, response: "expired", decidedAt: a.expires_at });
    }
  }
  return out;
}

/** parseDuration parses a Go duration ("1m30s", "500ms") or a number of seconds, in milliseconds. */
export function parseDuration(d: string | number | undefined): number {
  if (d === undefined) return 0;
  if (typeof d === "number") return d * 1000;
  const units: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };
  let ms = 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/gy;
  const sign = d.startsWith("-") ? -1 : 1;
  const s = d.replace(/^[-+]/, "");
  if (s === "0") return 0;
  let m: RegExpExecArray | null;
  let end = 0;
  while ((m = re.exec(s)) !== null) {
    ms += Number(m[1]) * units[m[2]!]!;
    end = re.lastIndex;
  }
  if (end !== s.length || end === 0) throw new Error(`dwr: duration "${d}" is not a duration`);
  return sign * ms;
}

/** clip makes s at most n bytes of UTF-8 and never empty. */
function clip(s: string, n: number): string {
  s = s.toWellFormed();
  if (Buffer.byteLength(s) > n) {
    let b = Buffer.from(s).subarray(0, n - 3).toString("utf8");
    if (b.endsWith("\uFFFD")) b = b.slice(0, -1);
    s = b + "...";
  }
  return s || "failed";
}

interface Report {
  output?: string; // JSON text
  artifacts?: ArtifactRef[];
  modelSteps?: ModelStep[];
  failure?: { code?: string; message: string; retryable: boolean };
  wait?: WaitError;
}

/** reportFor returns what a worker reports for a handler's outcome. */
function reportFor(abort: AbortSignal, res: Result | void, err: unknown, steps: ModelStep[]): Report {
  const modelSteps = [...steps, ...((res && res.modelSteps) ?? [])];
  const ms = modelSteps.length > 0 ? modelSteps : undefined;
  if (err instanceof WaitError) return { wait: err };
  if (err !== undefined) {
    let f: Report["failure"];
    if (err instanceof Permanent) f = { code: err.code, message: err.message, retryable: false };
    else if (err instanceof Failure) f = { code: err.code, message: err.message, retryable: err.retryable };
    else if (err instanceof Error) f = { message: err.message, retryable: true };
    else f = { message: String(err), retryable: true };
    if (f.code === undefined && abort.aborted && causeOf(abort.reason) === Cause.Timeout) f.code = SDKCode.Timeout;
    f.message = clip(f.message, maxMessage);
    if (f.code !== undefined) f.code = clip(f.code, maxCode);
    return { failure: f, modelSteps: ms };
  }
  let out: string | undefined;
  try {
    out = res && res.output !== undefined ? JSON.stringify(res.output) : undefined;
  } catch (e) {
    return { failure: { code: SDKCode.InvalidResult, message: clip("the result's output does not encode to JSON: " + (e as Error).message, maxMessage), retryable: false }, modelSteps: ms };
  }
  if (out !== undefined && Buffer.byteLength(out) > MaxPayloadBytes) {
    return {
      failure: { code: SDKCode.InvalidResult, message: `the result's output is ${Buffer.byteLength(out)} bytes; at most ${MaxPayloadBytes} are allowed (store large outputs as artifacts)`, retryable: false },
      modelSteps: ms,
    };
  }
  return { output: out, artifacts: (res && res.artifacts) || undefined, modelSteps: ms };
}

/** Delivery is one work item delivered to this worker, from its receipt to its settlement. */
class Delivery {
  item!: WorkItem;
  sealed = false;
  private token = "";
  private beat?: { task_id: string; attempt: number; token: string };
  private beating?: Promise<unknown>;
  private readonly received = Date.now();
  private readonly delivered: number;

  constructor(
    private readonly w: Worker,
    private readonly c: Config,
    private readonly svc: Service,
    private readonly msg: JsMsg,
    private readonly hard: AbortSignal,
  ) {
    this.delivered = msg.info.deliveryCount;
  }

  private log(outcome: string, attempt: number, detail = "") {
    const line = `dwr: job task=${this.item.task_id} attempt=${attempt} outcome=${outcome} delivered=${this.delivered} duration=${Date.now() - this.received}ms${detail ? " " + detail : ""}`;
    if (outcome === "unsettled" || outcome === "stopped") this.c.log.warn(line);
    else this.c.log.info(line);
  }

  /** heartbeats renews the item's lease every lease/3 and, once claimed, tells the service the attempt is alive. */
  private heartbeats(): () => Promise<void> {
    const every = this.w.lease / 3;
    const t = setInterval(() => {
      try {
        this.msg.working();
      } catch (e) {
        this.c.log.debug("dwr: lease renewal failed:", (e as Error).message);
      }
      const b = this.beat;
      if (b && !this.beating) {
        this.beating = this.svc
          .command("task.heartbeat", b, { once: true, timeoutMs: Math.min(every, 5000) })
          .catch((e) => this.c.log.debug("dwr: heartbeat not answered:", (e as Error).message))
          .finally(() => (this.beating = undefined));
      }
    }, every);
    return async () => {
      clearInterval(t);
      await this.retireBeat();
    };
  }

  /** retireBeat ends the attempt's heartbeats once any in flight is answered: the report follows the last one. */
  private async retireBeat() {
    this.beat = undefined;
    await this.beating;
  }

  private ack() {
    try {
      this.msg.ack();
    } catch (e) {
      this.c.log.warn("dwr: ack failed:", (e as Error).message);
    }
  }

  private nak() {
    try {
      this.msg.nak(this.w.lease);
    } catch (e) {
      this.c.log.warn("dwr: nak failed:", (e as Error).message);
    }
  }

  async getTask(id: string, signal?: AbortSignal): Promise<Task> {
    const r = await this.svc.query<Task>("task.get", { id }, { signal: signal ?? this.hard });
    if (!r.ok) throw new DwrError(r.error!, "task.get");
    return r.result!;
  }

  /** readTask reads the task until ok holds for it, for up to 5 s (the views follow the writer by a moment). */
  private async readTask(id: string, ok: (t: Task) => boolean): Promise<{ task: Task; caughtUp: boolean }> {
    const deadline = Date.now() + viewLagMs;
    for (;;) {
      const t = await this.getTask(id);
      if (ok(t)) return { task: t, caughtUp: true };
      if (Date.now() > deadline) return { task: t, caughtUp: false };
      await sleep(50, this.hard);
      this.hard.throwIfAborted();
    }
  }

  /** claim starts the attempt and returns it with its token, or settles the item and returns undefined. */
  private async claim(): Promise<{ task: Task; attempt: Attempt } | undefined> {
    const it = this.item;
    const body: Record<string, unknown> = {
      task_id: it.task_id,
      executor: this.c.executor,
      executor_version: this.c.version || undefined,
      omit_task: it.task !== undefined,
    };
    const id = `claim.${it.task_id}.${it.attempt}.${this.delivered}`;
    let r: Reply<CommandResult>;
    try {
      r = await this.svc.command<CommandResult>("task.claim", body, { commandId: id, signal: this.hard });
      if (!r.ok && r.error!.code === "conflict" && this.delivered > 1) {
        // A redelivery: the task may still run the attempt an earlier delivery of this item started.
        const { task: t, caughtUp } = await this.readTask(it.task_id, (t) => t.state !== "ready");
        if (!caughtUp) {
          this.log("unsettled", 0, `the views still show task ${it.task_id} as ${t.state}`);
          return undefined;
        }
        const a = runningFromItem(t, it.attempt);
        if (a) {
          body.supersedes = a.n;
          body.omit_task = false; // the item's task is stale now
          for (let tries = 1; ; tries++) {
            r = await this.svc.command<CommandResult>("task.claim", body, { commandId: `${id}.s${a.n}`, signal: this.hard });
            if (r.ok || r.error!.code !== "conflict") break;
            // The service still counts the attempt alive within its lease: wait for the moment it names, holding the item.
            const ra = r.error!.retry_after ? Date.parse(r.error!.retry_after) - Date.now() + 10 : -1;
            if (ra >= -10 && ra <= this.w.lease + 5000 && tries < supersedeTries) {
              await sleep(Math.max(ra, 0), this.hard);
              this.hard.throwIfAborted();
              continue;
            }
            this.nak();
            this.log("skipped", 0, "supersede refused: " + r.error!.message);
            return undefined;
          }
        }
      }
    } catch (e) {
      this.log("stopped", 0, (e as Error).message);
      return undefined;
    }
    if (!r.ok) {
      const e = r.error!;
      if (e.code === "conflict" || e.code === "not_found") {
        this.ack(); // the task is no longer ready: the item is stale
        this.log("skipped", 0, e.message);
      } else {
        this.c.log.error(`dwr: claim of task ${it.task_id} refused: ${e.code}: ${e.message}`);
        this.nak();
        this.log("skipped", 0, "claim refused: " + e.code);
      }
      return undefined;
    }
    const cr = r.result!;
    let t = cr.task;
    let a: Attempt | undefined;
    if (t) {
      a = t.attempts?.find((x) => x.n === cr.attempt);
    } else if (it.task && cr.token_hash && cr.attempt === (it.task.attempts?.length ?? 0) + 1) {
      t = it.task;
      a = {
        n: cr.attempt,
        executor: this.c.executor,
        executor_version: this.c.version || undefined,
        operation_key: it.operation_key,
        state: "running",
        started_at: new Date(this.received).toISOString(),
        token_hash: cr.token_hash,
      };
    } else {
      try {
        t = await this.getTask(it.task_id);
      } catch (e) {
        this.log("stopped", 0, (e as Error).message);
        return undefined;
      }
      a = t.attempts?.find((x) => x.n === cr.attempt);
    }
    if (cr.state !== "running" || !a || a.state !== "running" || a.executor !== this.c.executor) {
      this.ack(); // the claim ended the task (attempts or budget spent), or started no attempt of ours
      this.log("skipped", cr.attempt ?? 0, `the claim started no attempt; task is ${cr.state}`);
      return undefined;
    }
    if (!cr.token) {
      this.c.log.error(`dwr: the claim of task ${it.task_id} answered no token`);
      this.log("unsettled", cr.attempt ?? 0, "the claim returned no token");
      return undefined;
    }
    this.token = cr.token;
    return { task: t, attempt: a };
  }

  /** fencedCause says why the service refused a command of the attempt as not holding the task. */
  private async fencedCause(attempt: number, watch: Watch): Promise<AbortReason> {
    if (watch.ended) return cancelled();
    try {
      const { task } = await this.readTask(this.item.task_id, (t) => running(t)?.n !== attempt);
      if (terminal(task.state)) return cancelled();
    } catch {
      // the lease is lost all the same
    }
    return leaseLost();
  }

  private async dependencies(t: Task): Promise<Record<string, Dependency>> {
    const ids = t.depends_on ?? [];
    const out: Record<string, Dependency> = {};
    if (ids.length === 0) return out;
    let list = this.item.dependencies;
    if (this.item.task !== t || !list || list.length !== ids.length) {
      list = [];
      for (const id of ids) {
        const { task, caughtUp } = await this.readTask(id, (x) => x.state === "accepted");
        if (!caughtUp) throw new Error(`dependency ${id} is ${task.state}, not accepted`);
        const last = task.attempts?.findLast((x) => x.state === "succeeded");
        list.push({ key: task.key, task_id: task.id, result: last?.result, artifacts: last?.artifacts });
      }
    }
    for (const d of list) out[d.key || d.task_id] = d;
    return out;
  }

  /** execute claims the item's attempt, runs the handler and reports. */
  async execute(handler: Handler, watch: Watch): Promise<void> {
    const stopBeats = this.heartbeats();
    try {
      const claimed = await this.claim();
      if (!claimed) return;
      const { task: t, attempt: a } = claimed;
      this.beat = { task_id: t.id, attempt: a.n, token: this.token };
      await this.run(handler, t, a, watch);
    } finally {
      await stopBeats();
    }
  }

  private async run(handler: Handler, t: Task, a: Attempt, watch: Watch): Promise<void> {
    const ctl = new AbortController();
    const onHard = () => ctl.abort(this.hard.reason);
    this.hard.addEventListener("abort", onHard, { once: true });
    let deadline: Date | undefined;
    const timeout = parseDuration(t.spec.timeout);
    if (a.deadline) deadline = new Date(a.deadline);
    else if (timeout > 0) deadline = new Date(Date.parse(a.started_at) + timeout);
    const deadlineTimer = deadline ? setTimeout(() => ctl.abort(timedOut()), Math.max(deadline.getTime() - Date.now(), 0)) : undefined;
    try {
      let deps: Record<string, Dependency>;
      try {
        deps = await this.dependencies(t);
      } catch (e) {
        await this.report(a.n, { failure: { code: SDKCode.Dependencies, message: clip("the results of the task's dependencies could not be read: " + (e as Error).message, maxMessage), retryable: true } }, watch);
        return;
      }
      watch.bind(a.n, ctl);
      const job = new Job(
        {
          taskId: t.id,
          workspace: t.workspace,
          queue: t.spec.queue,
          goalId: t.goal_id,
          key: t.key,
          title: t.spec.title,
          attempt: a.n,
          operationKey: a.operation_key,
          input: t.spec.input,
          checkpoint: t.checkpoint,
          priorAttempts: (t.attempts ?? []).filter((p) => p.n < a.n),
          verifications: (t.verifications ?? []).filter((v) => v.outcome === "FAIL"),
          signal: t.signal,
          decisions: decisionsOf(t),
          dependencies: deps,
          deadline,
          abort: ctl.signal,
        },
        this.backend(a.n, ctl, watch),
      );
      let res: Result | void = undefined;
      let err: unknown;
      try {
        res = await handler(job);
      } catch (e) {
        err = e ?? new Error("the handler threw " + String(e));
      }
      const rep = reportFor(ctl.signal, res, err, job.modelSteps);
      await this.retireBeat();
      if (this.hard.aborted) {
        this.log("stopped", a.n, "the drain timeout passed; the item will be redelivered");
        return;
      }
      await this.report(a.n, rep, watch);
    } finally {
      clearTimeout(deadlineTimer);
      this.hard.removeEventListener("abort", onHard);
    }
  }

  /** backend returns the commands of the job's attempt: checkpoints, artifacts, approval requests. */
  private backend(attempt: number, ctl: AbortController, watch: Watch): JobBackend {
    const id = this.item.task_id;
    let seq = 0;
    let chain: Promise<unknown> = Promise.resolve();
    const fenced = async (what: string, e: { message: string }) => {
      const why = await this.fencedCause(attempt, watch);
      ctl.abort(why);
      return new AbortReason(why.code, `${why.message}: ${what} refused: ${e.message}`);
    };
    return {
      saveCheckpoint: (data: unknown) => {
        const text = JSON.stringify(data);
        if (text === undefined) return Promise.reject(new Error("dwr: the checkpoint does not encode to JSON"));
        if (Buffer.byteLength(text) > MaxPayloadBytes) {
          return Promise.reject(new Error(`dwr: checkpoint of task ${id} is ${Buffer.byteLength(text)} bytes; at most ${MaxPayloadBytes} are allowed (store large state as an artifact)`));
        }
        const n = ++seq;
        const p = chain.then(async () => {
          const r = await this.svc.command(
            "task.checkpoint",
            { task_id: id, attempt, token: this.token, checkpoint: JSON.parse(text) },
            { commandId: `checkpoint.${id}.${attempt}.${n}`, signal: this.hard },
          );
          if (r.ok) return;
          const e = r.error!;
          if (e.code === "conflict" || e.code === "not_found") throw await fenced("checkpoint", e);
          throw new DwrError(e, "task.checkpoint");
        });
        chain = p.catch(() => undefined);
        return p;
      },
      putArtifact: async (name: string, bytes: Uint8Array | string) =>
        refOf(await putArtifact(this.svc, bytes, { name, taskId: id }, this.hard)),
      requestApproval: async (body: Record<string, unknown>, digest: string) => {
        const r = await this.svc.command<CommandResult>(
          "task.request_approval",
          { ...body, task_id: id, attempt, token: this.token },
          { commandId: `approval.${id}.${attempt}.${digest.slice("sha256:".length)}`, signal: this.hard },
        );
        if (r.ok) {
          if (r.result?.approval_id) return r.result.approval_id;
          // Recorded, but the reply (a duplicate's) does not name the approval: the task does.
          const { task } = await this.readTask(id, (t) => (t.approvals ?? []).some((x) => x.attempt === attempt && x.action_digest === digest));
          return task.approvals?.findLast((x) => x.attempt === attempt && x.action_digest === digest)?.id ?? "";
        }
        const e = r.error!;
        if (e.code === "conflict" || e.code === "not_found") throw await fenced("approval request", e);
        if (e.code === "invalid" || e.code === "too_large") throw new Permanent(new DwrError(e, "task.request_approval").message, { code: e.code });
        throw new DwrError(e, "task.request_approval");
      },
    };
  }

  /** report sends the attempt's outcome, then settles the item. */
  private async report(attempt: number, rep: Report, watch: Watch): Promise<void> {
    const id = this.item.task_id;
    const base = { task_id: id, attempt, token: this.token };
    let r: Reply | undefined;
    try {
      if (rep.wait?.approvalId !== undefined) {
        // The request recorded the approval, which parked the attempt.
        this.ack();
        this.log("waiting", attempt, rep.wait.message);
        return;
      }
      if (rep.wait) {
        const w = rep.wait;
        const body =
          w.signalName !== undefined
            ? { ...base, kind: "signal", signal: w.signalName }
            : { ...base, kind: "timer", until: w.until!.toISOString() };
        r = await this.svc.command("task.wait", body, { commandId: `wait.${id}.${attempt}`, signal: this.hard });
        if (!r.ok && r.error!.code === "invalid") {
          rep = { failure: { code: SDKCode.InvalidResult, message: clip("the service refused the wait: " + r.error!.message, maxMessage), retryable: false } };
        }
      } else if (!rep.failure) {
        const raw = `{"task_id":${JSON.stringify(id)},"attempt":${attempt},"token":${JSON.stringify(this.token)}` +
          (rep.output !== undefined ? `,"result":${rep.output}` : "") +
          (rep.artifacts?.length ? `,"artifacts":${JSON.stringify(rep.artifacts)}` : "") +
          (rep.modelSteps?.length ? `,"model_steps":${JSON.stringify(rep.modelSteps)}` : "") +
          "}";
        r = await this.svc.command("task.succeed", new TextEncoder().encode(raw), { commandId: `succeed.${id}.${attempt}`, signal: this.hard });
        if (!r.ok && (r.error!.code === "invalid" || r.error!.code === "too_large")) {
          rep = { failure: { code: SDKCode.InvalidResult, message: clip("the service refused the result: " + r.error!.message, maxMessage), retryable: false }, modelSteps: rep.modelSteps };
        }
      }
      if (rep.failure) {
        const f = rep.failure;
        r = await this.svc.command(
          "task.fail",
          { ...base, error: { code: f.code, message: f.message }, retryable: f.retryable, model_steps: rep.modelSteps },
          { commandId: `fail.${id}.${attempt}`, signal: this.hard },
        );
      }
    } catch (e) {
      this.log("unsettled", attempt, (e as Error).message);
      return;
    }
    if (r!.ok) {
      this.ack();
      this.log(rep.wait ? "waiting" : rep.failure ? (rep.failure.retryable ? "failed" : "failed_permanently") : "succeeded", attempt);
      return;
    }
    const e = r!.error!;
    if (e.code === "conflict" || e.code === "not_found") {
      await this.settleFenced(attempt, watch, e.message);
      return;
    }
    // Refused for another reason: left to be redelivered, so that a later attempt supersedes this one.
    this.c.log.error(`dwr: report of task ${id} attempt ${attempt} refused: ${e.code}: ${e.message}`);
    this.log("unsettled", attempt, "report refused: " + e.code);
  }

  /**
   * settleFenced settles the item of an attempt whose report was refused as
   * no longer holding the task: acknowledged, unless a redelivery of it now
   * runs an attempt of its own (an ack would take the item from under it).
   */
  private async settleFenced(attempt: number, watch: Watch, why: string) {
    if (!watch.ended) {
      try {
        const { task, caughtUp } = await this.readTask(this.item.task_id, (t) => running(t)?.n !== attempt);
        if (!caughtUp) {
          this.log("unsettled", attempt, "the views still show the attempt running");
          return;
        }
        const a = runningFromItem(task, this.item.attempt);
        if (a && a.n > attempt) {
          this.log("refused", attempt, `${why} (attempt ${a.n} holds the item)`);
          return;
        }
      } catch (e) {
        this.log("unsettled", attempt, (e as Error).message);
        return;
      }
    }
    this.ack();
    this.log("refused", attempt, why);
  }

  /** judge runs the verifier on a verify item and records its verdict. */
  async judge(verify: VerifyHandler): Promise<void> {
    const stopBeats = this.heartbeats();
    const it = this.item;
    try {
      if (this.sealed) {
        const t = await this.getTask(it.task_id);
        const a = t.attempts?.find((x) => x.n === it.attempt);
        if (!a) throw new Error(`task ${it.task_id} has no attempt ${it.attempt} to judge`);
        it.input = t.spec.input;
        it.result = a.result;
        it.verifications = t.verifications;
        it.prior_attempts = (t.attempts ?? []).filter((p) => p.n < it.attempt);
      }
      const check: Check = {
        taskId: it.task_id,
        workspace: it.workspace,
        queue: it.queue,
        goalId: it.goal_id,
        key: it.key,
        title: it.title,
        attempt: it.attempt,
        input: it.input,
        result: it.result,
        artifacts: it.artifacts ?? [],
        resultDigest: it.result_digest ?? "",
        priorAttempts: it.prior_attempts ?? [],
        verifications: it.verifications ?? [],
        abort: this.hard,
        getArtifact: (sha) => getArtifact(this.svc, sha, { signal: this.hard }),
      };
      let v: Verdict;
      try {
        v = await verify(check);
      } catch (e) {
        this.log("unsettled", it.attempt, (e as Error)?.message ?? String(e));
        this.nak();
        return;
      }
      const evidence = v?.evidence === undefined ? undefined : JSON.stringify(v.evidence);
      let bad = "";
      if (!v || !["PASS", "FAIL", "INCONCLUSIVE"].includes(v.outcome)) bad = `outcome "${v?.outcome}" is not PASS, FAIL or INCONCLUSIVE`;
      else if (evidence !== undefined && Buffer.byteLength(evidence) > MaxPayloadBytes) bad = `the evidence is ${Buffer.byteLength(evidence)} bytes; at most ${MaxPayloadBytes} are allowed (store it as an artifact)`;
      if (bad) {
        this.c.log.error(`dwr: an unusable verdict on task ${it.task_id}; the item is delivered again: ${bad}`);
        this.log("unsettled", it.attempt, bad);
        this.nak();
        return;
      }
      const r = await this.svc.command(
        "task.verify",
        {
          task_id: it.task_id,
          attempt: it.attempt,
          outcome: v.outcome,
          evidence: evidence === undefined ? undefined : JSON.parse(evidence),
          evidence_refs: v.evidenceRefs,
          verifier: this.c.executor,
          verifier_version: this.c.version || undefined,
          result_digest: it.result_digest,
        },
        { commandId: `verify.${it.task_id}.${it.attempt}.${this.c.executor}`, signal: this.hard },
      );
      if (r.ok) {
        this.ack();
        this.log("verified", it.attempt, "verdict=" + v.outcome);
      } else if (r.error!.code === "conflict" || r.error!.code === "not_found") {
        this.ack(); // the task moved on: the item is stale
        this.log("refused", it.attempt, r.error!.message);
      } else {
        this.log("unsettled", it.attempt, `verdict refused: ${r.error!.code}: ${r.error!.message}`);
      }
    } catch (e) {
      this.log("unsettled", it.attempt, (e as Error).message);
    } finally {
      await stopBeats();
    }
  }
}
