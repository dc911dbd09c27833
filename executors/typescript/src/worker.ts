import type { Tracer } from "@opentelemetry/api";
import { hostname } from "node:os";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { jetstream, type Consumer, type ConsumerMessages, type JsMsg } from "@nats-io/jetstream";
import { Delivery, Watch, checkItem } from "./delivery.js";
import { QueueKeys } from "./queue_keys.js";
import { SealedPrefix } from "./seal.js";
import { DwrError, leaseLost, stopping, timedOut } from "./errors.js";
import type { Job, Result, TaskAttempt } from "./job.js";
import { Service, sleep, type TraceContext } from "./service.js";
import {
  JetStreamAPIPrefix,
  MaxMessageBytes,
  type ArtifactRef,
  type Attempt,
  type CommandResult,
  type Handoff,
  type Verification,
  type WorkItem,
} from "./wire.js";

export { SDKCode } from "./report.js";
export { parseDuration } from "./duration.js";

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
  /**
   * Take every item from the queue. By default a report asks the service for the handoff (`next: true`):
   * when the reported task leaves a dependent ready on this queue, the report's reply hands this worker
   * that task's attempt, started in the report's commit, and the worker runs it at once in the same slot —
   * no work item, no fetch, no claim. The worker does not ask once stop() is called (a handed attempt
   * nobody runs waits out its lease before the task is ready again).
   */
  noHandoff?: boolean;
  /** Receives the worker's logs; default: none. */
  logger?: Logger;
  /**
   * Makes an OpenTelemetry span per job, "dwr.job <queue>" (kind consumer), a child of the trace its work
   * item carries (a handed attempt's: of the job whose report was handed it); the job's commands, and
   * `job.traceparent`, are in the span. Default: no span, and the job's commands carry the item's trace.
   */
  tracer?: Tracer;
}

/** A handler runs one job and returns its result; throwing fails the attempt (retried unless Permanent). */
export type Handler = (job: Job) => Promise<Result | void> | Result | void;

/** A result to judge: what a verifier receives. */
export interface Check extends TaskAttempt {
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
  /** putArtifact stores evidence too bulky for the verdict, and returns its reference for Verdict.evidenceRefs. */
  putArtifact(name: string, bytes: Uint8Array | string): Promise<ArtifactRef>;
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
const fetchWindowMs = 15000;
// The most work items one fetch brings: a work item may be near 1 MiB, so
// 8 are at most 8 MiB, well under the server's max_pending (64 MiB by
// default), past which it cuts the connection as a slow consumer — a fetch
// of 64 such items passed it. (nats.js takes a count or a byte bound for a
// fetch, not both.)
const fetchMaxItems = 8;
const endingEvents = ["cancelled", "failed", "rejected", "attempt_abandoned", "attempt_failed"] as const;

/** WorkerOptions with their defaults applied, validated. */
export interface Config {
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
  noHandoff: boolean;
  log: Logger;
  tracer?: Tracer;
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
    noHandoff: o.noHandoff ?? false,
    log: o.logger ?? silent,
    tracer: o.tracer,
  };
  const bad: string[] = [];
  if (!c.nc) bad.push("nc is required");
  if (!c.queue) bad.push("queue is required");
  else if (!nameRe.test(c.queue))
    bad.push(`queue "${c.queue}" is not a valid name (lower-case letters, digits, '-' and '_', at most 63)`);
  if (!nameRe.test(c.workspace))
    bad.push(`workspace "${c.workspace}" is not a valid name (lower-case letters, digits, '-' and '_', at most 63)`);
  if (!nameRe.test(c.prefix)) bad.push(`prefix "${c.prefix}" is not a valid subject token`);
  if (c.executor.trim() === "" || Buffer.byteLength(c.executor) > maxLabel)
    bad.push(`executor "${c.executor}" must be 1 to ${maxLabel} bytes`);
  if (Buffer.byteLength(c.version) > maxLabel) bad.push(`version is more than ${maxLabel} bytes`);
  if (!Number.isInteger(c.concurrency) || c.concurrency < 1)
    bad.push(`concurrency ${c.concurrency} must be an integer of at least 1`);
  if (!(c.leaseMs >= MinLeaseMs)) bad.push(`leaseMs ${c.leaseMs} must be at least ${MinLeaseMs}`);
  if (!Number.isInteger(c.maxDeliver) || c.maxDeliver < 1)
    bad.push(`maxDeliver ${c.maxDeliver} must be an integer of at least 1`);
  if (!(c.drainTimeoutMs >= 0)) bad.push(`drainTimeoutMs ${c.drainTimeoutMs} must not be negative`);
  if (bad.length > 0) throw new Error("dwr: invalid worker options: " + bad.join("; "));
  return c;
}

/**
 * Worker takes work items from one queue and runs a handler for each, at
 * most `concurrency` at once: it keeps the item's lease (an in-progress ack
 * every lease/3), claims the attempt (task.claim) — lazily: a fresh item
 * that carries its task runs at once, and is claimed at the job's first
 * command that needs the attempt's token, at its first heartbeat (from then
 * on a task.heartbeat every lease/3), or by its report, which then carries
 * the claim; a redelivered item is claimed before its handler starts —,
 * stops the handler (job.abort) when the task is cancelled or the attempt
 * loses its lease, and reports the outcome (task.succeed, task.fail,
 * task.wait) with its own command id, sent again with that id until
 * answered; it acknowledges the item once the report is answered. Its
 * reports ask for the handoff (unless noHandoff): an attempt the service
 * hands it in a report's reply — the next task of a chain on this queue,
 * already started for it — runs at once in the same slot, without a claim
 * or a work item, kept by its heartbeats. Every command of a job carries
 * the trace its item carries (`job.traceparent`).
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
  private readonly queueKeys: QueueKeys;

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
    this.queueKeys = new QueueKeys(this.cfg);
  }

  /** The queue's lease in force, in milliseconds. */
  get lease(): number {
    return this.leaseMs;
  }

  /** @internal Whether stop() was called: reports ask for no handoff. */
  get stopping(): boolean {
    return this.stopCtl.signal.aborted;
  }

  /** @internal Whether this worker judges verify items (a Verifier): it reports no attempts, and asks for no handoff. */
  get verifies(): boolean {
    return this.verifier !== undefined;
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

  /** stop stops fetching and drains (see run); it resolves once the worker has stopped (run says how it ended). */
  async stop(): Promise<void> {
    if (!this.stopCtl.signal.aborted) {
      this.stopCtl.abort(stopping());
      this.fetching?.stop();
      this.slotFreed?.();
    }
    await this.done?.catch(() => undefined); // run() carries its error
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
      try {
        const batch = await cons.fetch({ max_messages: Math.min(n, fetchMaxItems), expires: fetchWindowMs });
        this.fetching = batch;
        if (stop.aborted) batch.stop();
        for await (const m of batch) {
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
    if (got.paused) {
      c.log.warn(`dwr: queue ${c.queue} is paused: it hands out no job until it is resumed (dwr queue resume ${c.queue})`);
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

  /**
   * deliver handles one work item: claim, run, report, acknowledge — and
   * then each attempt its report was handed, in turn (runHanded), in the
   * same slot. It resolves once the item is settled and the last handed
   * attempt reported.
   */
  private async deliver(msg: JsMsg): Promise<void> {
    let d = await this.deliverItem(msg);
    while (d?.next) d = await this.runHanded(d.next, d.trace);
  }

  /** deliverItem handles one work item, and returns its delivery (whose next is the attempt its report was handed, if any). */
  private async deliverItem(msg: JsMsg): Promise<Delivery | undefined> {
    const d = new Delivery(this, this.cfg, this.svc, msg, this.hardCtl.signal);
    try {
      return await this.settleItem(d, msg);
    } finally {
      d.endSpan();
    }
  }

  /** settleItem decodes msg's item and runs its job (or judges it) as d, and returns d unless it could not run. */
  private async settleItem(d: Delivery, msg: JsMsg): Promise<Delivery | undefined> {
    if (msg.data.length > MaxMessageBytes) {
      this.cfg.log.error(`dwr: a work item of ${msg.data.length} bytes, more than ${MaxMessageBytes}; handing it back`);
      msg.nak(this.leaseMs);
      return;
    }
    let item: WorkItem;
    const kind = this.verifier ? "verify" : "execute";
    const text = new TextDecoder().decode(msg.data);
    try {
      item = JSON.parse(text) as WorkItem;
      checkItem(item, this.cfg, kind);
    } catch (e) {
      // An item this worker cannot run: back for one that can, and past
      // MaxDeliver to the service's quarantine, which fails its task.
      this.cfg.log.error("dwr: a work item this worker cannot run; handing it back:", (e as Error).message);
      msg.nak(this.leaseMs);
      return;
    }
    if (text.includes(SealedPrefix)) {
      // Sealed with the queue's key (a verification queue's too): opened here (queue_keys.ts); else read
      // opened from the service.
      const opened = await this.queueKeys.openItem(text, kind, d.svc, this.hardCtl.signal);
      if (opened) item = opened;
      else {
        d.sealed = true;
        item.task = undefined;
        item.dependencies = undefined;
      }
    }
    d.item = item;
    if (this.verifier) {
      await d.judge(this.verifier);
      return;
    }
    const watch = this.newWatch(item.task_id);
    try {
      await d.execute(this.handler!, watch);
    } finally {
      watch.stop();
    }
    return d;
  }

  // The handoff (wire.ts's Handoff). A report asks for it unless the worker
  // is configured not to (noHandoff), judges verifications, or stops; the
  // service then may start, in the report's commit, the attempt of a task
  // the report left ready on this queue, and hand it in the reply: its
  // token and its work item. The worker runs it at once, in the slot the
  // reported job had, as if it had claimed it — no work item, so nothing to
  // acknowledge or renew: the attempt's heartbeats keep its lease, and the
  // service abandons it if they stop. Its own report may be handed the next
  // one, and so on down a chain.

  /**
   * runHanded runs handed attempt h: the job, its heartbeats, its report,
   * in trace (the trace of the job whose report was handed h). It returns
   * its delivery, whose next is the attempt that report was handed, if any.
   */
  private async runHanded(h: Handoff, trace?: TraceContext): Promise<Delivery | undefined> {
    const it = h.item!;
    let a: Attempt | undefined;
    let err: unknown;
    try {
      checkItem(it, this.cfg, "execute");
      if (it.task && it.task_id === h.task_id && it.attempt === h.attempt && it.task.id === h.task_id) {
        a = it.task.attempts?.find((x) => x.n === h.attempt);
      }
    } catch (e) {
      err = e;
    }
    if (err || !a || a.state !== "running") {
      // Not for this worker to run (a service of another version?): the attempt's lease lapses, and the task
      // goes back to the queue.
      this.cfg.log.error(
        `dwr: a handed attempt this worker cannot run (task ${h.task_id} attempt ${h.attempt}); it returns to the queue when its lease lapses:`,
        err instanceof Error ? err.message : "the item's task does not run the attempt",
      );
      return undefined;
    }
    const d = new Delivery(this, this.cfg, this.svc, undefined, this.hardCtl.signal, trace);
    d.item = it;
    const watch = this.newWatch(it.task_id);
    try {
      await d.runHanded(this.handler!, it.task!, a, h.token!, watch);
    } finally {
      watch.stop();
      d.endSpan();
    }
    return d;
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
