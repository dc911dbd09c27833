import { createTraceState, ROOT_CONTEXT, SpanKind, trace, type Span, type SpanContext, type Tracer } from "@opentelemetry/api";
import type { JsMsg } from "@nats-io/jetstream";
import { getArtifact, putArtifact, refOf } from "./artifacts.js";
import { AbortReason, DwrError, Permanent, cancelled, leaseLost, timedOut } from "./errors.js";
import { Job, type Decision, type Delegated, type JobBackend } from "./job.js";
import { SDKCode, clip, maxMessage, runHandler, type Report } from "./report.js";
import { sleep, traceContextOf, traceparentRe, type Service, type TraceContext } from "./service.js";
import { parseDuration } from "./duration.js";
import type { Check, Config, Handler, Verdict, VerifyHandler, Worker } from "./worker.js";
import {
  attemptCount,
  Header,
  MaxPayloadBytes,
  terminal,
  type Attempt,
  type CommandResult,
  type Dependency,
  type Handoff,
  type Reply,
  type Task,
  type WireError,
  type WorkItem,
} from "./wire.js";

// Delivery: one work item, from its receipt to its settlement (claim, run,
// report, acknowledge), and the watch of its task's ending events.

const viewLagMs = 5000;
const supersedeTries = 3;

// The lazy claim (as the Go SDK's, executors/lazy_claim.go). An execute
// item carries its task, so a short job need not claim before it runs: the
// worker starts the job at once, holding the item by in-progress acks as
// ever (the work consumer's ack wait is the lease), and claims at the first
// of
//
//   - the job's first command of the attempt (saveCheckpoint,
//     requestApproval, a wait): they carry the attempt's token;
//   - the moment its first heartbeat is due (lease/3): from there on a long
//     job holds a claimed attempt and heartbeats, exactly as a job that
//     claimed first — and the claim never holds up the in-progress acks;
//   - its end: then the report itself carries the claim (task.succeed or
//     task.fail with `claim: {executor, executor_version}` instead of a
//     token), and the service starts and ends the attempt in one commit.
//
// A claim or merged report the service refuses because the task is no
// longer ready for the attempt (cancelled, or claimed through a redelivery
// of the item) ends the job as a lost attempt (cancelled when the task has
// ended); a claim not answered is sent again, with the same command id, at
// the next need. A redelivered item, one without its task, or one that
// waited in the stream longer than lazyMaxAgeMs is claimed first, as
// before: the job then runs on the task the claim's reply (or the item)
// carries.

/**
 * lazyMaxAgeMs bounds how long an item may have waited in the stream for
 * its job to start unclaimed: an event that ends the task before the job's
 * watch begins (a cancellation) is not seen by the watch, so the job would
 * run until its claim (or merged report) is refused. The stream's timestamp
 * is the NATS server's clock; a skew with this process's shifts the window.
 */
export const lazyMaxAgeMs = 1000;

/** The claim a report carries when its job ran without claiming first. */
interface ReportClaim {
  executor: string;
  executor_version?: string;
}

/** What a report of the job carries: the attempt's token, or the claim. */
type ReportAuth = { token: string; claim?: undefined } | { token?: undefined; claim: ReportClaim };

/** anySignal returns a signal aborted when any of signals is. */
function anySignal(...signals: AbortSignal[]): AbortSignal {
  const ctl = new AbortController();
  for (const s of signals) {
    if (s.aborted) {
      ctl.abort(s.reason);
      break;
    }
    s.addEventListener("abort", () => ctl.abort(s.reason), { once: true, signal: ctl.signal });
  }
  return ctl.signal;
}

/**
 * fencedRefusal reports whether e refuses a command because its attempt no
 * longer holds the task: not the running attempt, the task gone, or a token
 * that is not the attempt's.
 */
function fencedRefusal(e: WireError): boolean {
  return (e.fields ?? []).some(
    (f) =>
      (f.pointer === "/attempt" && e.code === "conflict") ||
      (f.pointer === "/task_id" && e.code === "not_found") ||
      f.pointer === "/token",
  );
}

/** dependencyOf returns an accepted task's outcome, as a dependency (or a delegation's result) is handed it. */
function dependencyOf(t: Task): Dependency | undefined {
  if (t.state !== "accepted") return undefined;
  const last = t.attempts?.findLast((x) => x.state === "succeeded");
  return { key: t.key, task_id: t.id, result: last?.result, artifacts: last?.artifacts };
}

/** notDone returns the error of a command of the attempt that could not be sent: e's cause kept. */
function notDone(what: string, e: unknown): Error {
  const msg = `dwr: ${what}: ${e instanceof Error ? e.message : String(e)}`;
  return e instanceof AbortReason ? new AbortReason(e.code, msg) : new Error(msg, { cause: e });
}

/** checkItem throws when the item is not one this worker may run. */
export function checkItem(it: WorkItem, c: Config, kind: string) {
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
export class Watch {
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

/**
 * decisionsOf returns the decisions taken on the task's approvals, and their
 * expiries (response "expired"), in the order the approvals were requested,
 * each with the role its request asked (the approval's asked_role). An
 * approval without escalated_from asked its own role: so does every one of a
 * service that does not record them, where an escalation's decision counts
 * for the role escalated to only (the job asking the first role gets the
 * decision that escalated: not an approval).
 */
export function decisionsOf(t: Task): Decision[] {
  const out: Decision[] = [];
  for (const a of t.approvals ?? []) {
    const asked = (a.escalated_from ? a.asked_role : a.role) ?? "";
    if (a.decision) {
      const signedOff = a.decision.response === "approve" ? (a.sign_offs ?? []).map((s) => s.approver) : [];
      out.push({
        approvalId: a.id,
        actionDigest: a.action_digest,
        action: a.action,
        response: a.decision.response,
        comment: a.decision.comment,
        approver: a.decision.approver,
        role: a.decision.role,
        decidedAt: a.decision.decided_at,
        askedRole: asked,
        ...(signedOff.length > 0 ? { approvers: [...signedOff, a.decision.approver] } : {}),
      });
    } else if (a.state === "expired" && a.expires_at) {
      out.push({
        approvalId: a.id,
        actionDigest: a.action_digest,
        action: a.action,
        response: "expired",
        decidedAt: a.expires_at,
        askedRole: asked,
      });
    }
  }
  return out;
}

/** approvalRoleOf returns the role of the task's approval settings, which the service gives a request that names none. */
export function approvalRoleOf(t: Task): string {
  return t.spec.approval?.role ?? "";
}

/**
 * Delivery is one work item delivered to this worker, from its receipt to
 * its settlement — or one attempt handed to it in a report's reply (the
 * handoff: worker.ts's runHanded), which has no item to hold or settle.
 */
export class Delivery {
  item!: WorkItem;
  sealed = false;
  /** The attempt the job's report was handed, with its token and its item (the handoff). */
  next?: Handoff;
  /** The trace the item carries: every command of its job is sent in it. */
  readonly trace?: TraceContext;
  /** The service, in the item's trace. */
  readonly svc: Service;
  private token = "";
  private beat?: { task_id: string; attempt: number; token: string };
  private beating?: Promise<unknown>;
  private readonly received = Date.now();
  private readonly delivered: number;

  // The attempt's claim: lazy when the job started without a claim;
  // jobEnded once the handler returned (no claim is made for its heartbeats
  // any more); claimSealed once its report carries the claim; lazyErr when
  // a lazy claim was refused; claiming while a lazy claim is in flight; ctl
  // aborts the job; watching is the job's watch of its task's events.
  private lazy = false;
  private jobEnded = false;
  private claimSealed = false;
  private lazyErr?: AbortReason;
  private claiming?: Promise<string>;
  private ctl?: AbortController;
  private watching?: Watch;

  /**
   * A delivery of msg, in the trace its headers carry — or, without msg
   * (undefined for a handed attempt), in trace: the trace of the job whose
   * report was handed it.
   */
  constructor(
    private readonly w: Worker,
    private readonly c: Config,
    svc: Service,
    private readonly msg: JsMsg | undefined,
    private readonly hard: AbortSignal,
    trace?: TraceContext,
  ) {
    this.delivered = msg?.info.deliveryCount ?? 0;
    const h = msg?.headers;
    this.trace = msg ? (h ? traceContextOf(h.get(Header.Traceparent), h.get(Header.Tracestate)) : undefined) : trace;
    if (c.tracer) [this.span, this.trace] = jobSpan(c.tracer, c.queue, this.trace);
    this.svc = svc.traced(this.trace);
  }

  /** The job's span (Config.tracer), ended by endSpan. */
  private readonly span?: Span;

  /** endSpan ends the job's span, once the delivery is settled. */
  endSpan() {
    this.span?.end();
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
        this.msg?.working(); // a handed attempt has no item: its heartbeats alone keep it
      } catch (e) {
        this.c.log.debug("dwr: lease renewal failed:", (e as Error).message);
      }
      this.claimAtHeartbeat(every);
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
    if (!this.msg) return; // a handed attempt has no item
    try {
      this.msg.ack();
    } catch (e) {
      this.c.log.warn("dwr: ack failed:", (e as Error).message);
    }
  }

  private nak() {
    if (!this.msg) return; // a handed attempt has no item
    try {
      this.msg.nak(this.w.lease);
    } catch (e) {
      this.c.log.warn("dwr: nak failed:", (e as Error).message);
    }
  }

  /** lazyItem reports whether the job may run before claiming: the first delivery of an item that carries its task, ready for exactly the item's attempt, fresh from the stream. */
  private lazyItem(): boolean {
    const it = this.item;
    const t = it.task;
    return (
      t !== undefined &&
      t !== null &&
      this.delivered === 1 &&
      t.id === it.task_id &&
      t.workspace === it.workspace &&
      t.spec?.queue === it.queue &&
      t.state === "ready" &&
      attemptCount(t) + 1 === it.attempt &&
      this.msg !== undefined &&
      Date.now() - this.msg.time.getTime() < lazyMaxAgeMs
    );
  }

  /**
   * attemptToken returns the attempt's token, claiming the attempt first
   * when the job started without a claim (after a claim in flight, if any).
   * It throws the AbortReason of a claim the service refused (the job is
   * then aborted as a lost attempt), or the error of a claim not answered
   * (the next need claims again, with the same command id).
   */
  private async attemptToken(signal: AbortSignal): Promise<string> {
    for (;;) {
      if (this.token) return this.token;
      if (this.lazyErr) throw this.lazyErr;
      if (this.claimSealed) throw new Error("dwr: the attempt is claimed by its report");
      if (!this.claiming) return this.claimLazily(signal);
      await this.claiming.catch(() => undefined);
    }
  }

  /**
   * claimAtHeartbeat claims an unclaimed job's attempt when a heartbeat is
   * due, so that a long job holds its attempt (and heartbeats) as a job
   * that claimed first does. It never holds up the heartbeats: it does
   * nothing while a claim is in flight, and its own is given up after a
   * heartbeat interval (sent again at the next one, with the same id).
   */
  private claimAtHeartbeat(every: number) {
    if (this.claiming || !this.lazy || this.jobEnded || this.token || this.lazyErr || this.claimSealed) return;
    this.claimLazily(anySignal(this.hard, AbortSignal.timeout(every))).catch((e) => {
      if (!this.lazyErr) {
        this.c.log.debug(
          `dwr: the lazy claim of task ${this.item.task_id} was not answered; claiming again at the next heartbeat:`,
          (e as Error).message,
        );
      }
    });
  }

  /** reportAuth returns what the job's report carries: the attempt's token (claiming it first when needToken: a wait is a command of a running attempt), or else the claim itself — and no claim is made from then on. */
  private async reportAuth(needToken: boolean): Promise<ReportAuth> {
    if (needToken) return { token: await this.attemptToken(this.hard) };
    while (this.claiming) await this.claiming.catch(() => undefined);
    if (this.token) return { token: this.token };
    if (this.lazyErr) throw this.lazyErr;
    this.claimSealed = true;
    return { claim: { executor: this.c.executor, executor_version: this.c.version || undefined } };
  }

  /** claimLazily claims the attempt of a job that started without a claim, as the one claim in flight. */
  private claimLazily(signal: AbortSignal): Promise<string> {
    const p: Promise<string> = this.sendLazyClaim(signal).finally(() => {
      if (this.claiming === p) this.claiming = undefined;
    });
    this.claiming = p;
    return p;
  }

  private claimRequest(omitTask: boolean): { body: Record<string, unknown>; id: string } {
    const it = this.item;
    return {
      body: {
        task_id: it.task_id,
        executor: this.c.executor,
        executor_version: this.c.version || undefined,
        omit_task: omitTask,
      },
      // One id per delivery: a claim sent again is answered with its first outcome.
      id: `claim.${it.task_id}.${it.attempt}.${this.delivered}`,
    };
  }

  private async sendLazyClaim(signal: AbortSignal): Promise<string> {
    const it = this.item;
    const { body, id } = this.claimRequest(true); // the item carried the task
    const r = await this.svc.command<CommandResult>("task.claim", body, { commandId: id, signal });
    if (!r.ok) {
      const e = r.error!;
      const cause = e.code === "conflict" || e.code === "not_found" ? await this.endedCause(signal) : leaseLost();
      throw this.refuseLazily(cause, `the lazy claim was refused (${e.code}): ${e.message}`);
    }
    const cr = r.result;
    if (typeof cr !== "object" || cr === null) throw new Error("dwr: a claim reply without its result");
    if (cr.state !== "running" || cr.attempt !== it.attempt || !cr.token) {
      // The claim ended the task (attempts or budget spent), or answered for another attempt: this job's attempt never runs.
      const cause = cr.state !== undefined && terminal(cr.state) ? cancelled() : leaseLost();
      throw this.refuseLazily(cause, `the lazy claim started no attempt ${it.attempt}; task is ${cr.state}`);
    }
    this.token = cr.token;
    if (!this.jobEnded) this.beat = { task_id: it.task_id, attempt: it.attempt, token: cr.token }; // an ended job's heartbeats are retired
    return cr.token;
  }

  /** refuseLazily records that the job's attempt cannot be claimed, aborts the job with cause, and returns the reason. */
  private refuseLazily(cause: AbortReason, why: string): AbortReason {
    this.lazyErr = new AbortReason(cause.code, `${cause.message}: ${why}`);
    this.ctl?.abort(this.lazyErr);
    return this.lazyErr;
  }

  /** endedCause says why an unclaimed job's attempt was refused: cancelled when the task has ended, else lease lost (another delivery of the item claimed it). */
  private async endedCause(signal: AbortSignal): Promise<AbortReason> {
    if (this.watching?.ended) return cancelled();
    try {
      if (terminal((await this.getTask(this.item.task_id, signal)).state)) return cancelled();
    } catch {
      // the attempt is lost all the same
    }
    return leaseLost();
  }

  async getTask(id: string, signal?: AbortSignal, minSeq?: number): Promise<Task> {
    const r = await this.svc.query<Task>("task.get", { id }, { signal: signal ?? this.hard, minSeq });
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

  /** started is attempt n of the item's task as this worker starts it: running since the item came. */
  private started(n: number): Attempt {
    return {
      n,
      executor: this.c.executor,
      executor_version: this.c.version || undefined,
      operation_key: this.item.operation_key,
      state: "running",
      started_at: new Date(this.received).toISOString(),
    };
  }

  /** claim starts the attempt and returns it with its token, or settles the item and returns undefined. */
  private async claim(): Promise<{ task: Task; attempt: Attempt } | undefined> {
    const it = this.item;
    const { body, id } = this.claimRequest(it.task !== undefined);
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
    } else if (it.task && cr.token_hash && cr.attempt === attemptCount(it.task) + 1) {
      t = it.task;
      a = { ...this.started(cr.attempt), token_hash: cr.token_hash };
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
        list.push(dependencyOf(task)!);
      }
    }
    for (const d of list) out[d.key || d.task_id] = d;
    return out;
  }

  /** delegations returns the outcomes of the task's delegations that ended, each child task read once the views show it ended. */
  private async delegations(t: Task): Promise<Delegated[]> {
    const out: Delegated[] = [];
    for (const d of t.delegations ?? []) {
      if (d.state === "open") continue;
      const dd: Delegated = { key: d.key, goalId: d.goal_id, state: d.state, reason: d.reason, results: {} };
      for (const pt of d.tasks ?? []) {
        const { task, caughtUp } = await this.readTask(pt.task_id, (x) => terminal(x.state));
        if (!caughtUp)
          throw new Error(`delegation "${d.key}": task ${pt.task_id} of goal ${d.goal_id} is ${task.state}, not ended`);
        const dep = dependencyOf(task);
        if (dep) dd.results[pt.key] = dep;
      }
      out.push(dd);
    }
    return out;
  }

  /** execute claims the item's attempt (or not yet: the lazy claim), runs the handler and reports. */
  async execute(handler: Handler, watch: Watch): Promise<void> {
    this.watching = watch;
    const stopBeats = this.heartbeats();
    try {
      const it = this.item;
      if (this.sealed && this.delivered === 1) {
        // Sealed payloads are read opened from the service: the job runs from the task as task.get answers
        // it, when the views show it ready for the item's attempt already (else from its claim's reply),
        // read at least at the record that dispatched the item.
        try {
          const t = await this.getTask(it.task_id, undefined, it.seq);
          if (t.state === "ready" && attemptCount(t) + 1 === it.attempt) it.task = t;
        } catch {
          // claimed first
        }
      }
      if (this.lazyItem()) {
        // The job runs on the item's task, and claims lazily.
        this.lazy = true;
        await this.run(handler, it.task!, this.started(it.attempt), watch);
        return;
      }
      const claimed = await this.claim();
      if (!claimed) return;
      const { task: t, attempt: a } = claimed;
      this.beat = { task_id: t.id, attempt: a.n, token: this.token };
      await this.run(handler, t, a, watch);
    } finally {
      await stopBeats();
    }
  }

  /**
   * runHanded runs handed attempt a of task t (the handoff) with its token:
   * started for this worker in the commit of the report it was handed to,
   * it is claimed already, and has no work item to renew or acknowledge —
   * its heartbeats keep its lease.
   */
  async runHanded(handler: Handler, t: Task, a: Attempt, token: string, watch: Watch): Promise<void> {
    this.watching = watch;
    this.token = token;
    this.beat = { task_id: t.id, attempt: a.n, token };
    const stopBeats = this.heartbeats();
    try {
      await this.run(handler, t, a, watch);
    } finally {
      await stopBeats();
    }
  }

  /** askNext reports whether the job's report asks for the handoff: not when configured not to, for a verifier, or once the worker stops. The handed item comes opened, as a claim's task does, so a worker that could not open its queue's sealed items asks too. */
  private askNext(): boolean {
    return !this.c.noHandoff && !this.w.verifies && !this.w.stopping;
  }

  private async run(handler: Handler, t: Task, a: Attempt, watch: Watch): Promise<void> {
    const ctl = new AbortController();
    this.ctl = ctl;
    if (this.lazyErr) ctl.abort(this.lazyErr);
    const onHard = () => ctl.abort(this.hard.reason);
    this.hard.addEventListener("abort", onHard, { once: true });
    if (this.hard.aborted) onHard();
    let deadline: Date | undefined;
    let timeout = 0;
    try {
      timeout = parseDuration(t.spec.timeout);
    } catch {
      // unreadable: the service still fails the attempt at its deadline
    }
    if (a.deadline) deadline = new Date(a.deadline);
    else if (timeout > 0) deadline = new Date(Date.parse(a.started_at) + timeout);
    if (deadline && Number.isNaN(deadline.getTime())) deadline = undefined; // unreadable: the service still fails the attempt at its deadline
    const deadlineTimer = deadline
      ? setTimeout(() => ctl.abort(timedOut()), Math.max(deadline.getTime() - Date.now(), 0))
      : undefined;
    try {
      // The results the job is handed that cannot be read fail the attempt, to be retried.
      const unread = (code: string, what: string, e: unknown) =>
        this.report(
          a.n,
          {
            failure: {
              code,
              message: clip(`the results of the task's ${what} could not be read: ` + (e as Error).message, maxMessage),
              retryable: true,
            },
          },
          watch,
        );
      let deps: Record<string, Dependency>;
      let delegated: Delegated[];
      try {
        delegated = await this.delegations(t);
      } catch (e) {
        await unread(SDKCode.Delegations, "delegations", e);
        return;
      }
      try {
        deps = await this.dependencies(t);
      } catch (e) {
        await unread(SDKCode.Dependencies, "dependencies", e);
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
          omitted: t.omitted,
          verifications: (t.verifications ?? []).filter((v) => v.outcome === "FAIL"),
          signal: t.signal,
          decisions: decisionsOf(t),
          approvalRole: approvalRoleOf(t),
          dependencies: deps,
          delegations: delegated,
          deadline,
          abort: ctl.signal,
          traceparent: this.trace?.traceparent,
        },
        this.backend(a.n, ctl, watch),
      );
      const rep = await runHandler(handler, job); // job.abort is ctl.signal
      this.jobEnded = true; // its heartbeats claim no more
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
          return Promise.reject(
            new Error(
              `dwr: checkpoint of task ${id} is ${Buffer.byteLength(text)} bytes; at most ${MaxPayloadBytes} are allowed (store large state as an artifact)`,
            ),
          );
        }
        const n = ++seq;
        const p = chain.then(async () => {
          let token: string;
          try {
            token = await this.attemptToken(this.hard);
          } catch (e) {
            throw notDone(`checkpoint of task ${id} not saved`, e);
          }
          const r = await this.svc.command(
            "task.checkpoint",
            { task_id: id, attempt, token, checkpoint: JSON.parse(text) },
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
      getArtifact: (sha256: string) => getArtifact(this.svc, sha256, { signal: this.hard }),
      delegate: async (body: Record<string, unknown>, key: string) => {
        let token: string;
        try {
          token = await this.attemptToken(this.hard);
        } catch (e) {
          throw notDone(`delegation of task ${id} not recorded`, e);
        }
        const r = await this.svc.command<CommandResult>(
          "task.delegate",
          { ...body, task_id: id, attempt, token },
          { commandId: `delegate.${id}.${attempt}.${key}`, signal: this.hard },
        );
        if (r.ok) return r.result?.goal_id ?? "";
        const e = r.error!;
        if (fencedRefusal(e)) throw await fenced("delegation", e);
        if (e.code === "unavailable" || e.code === "internal") throw new DwrError(e, "task.delegate");
        throw new Permanent(new DwrError(e, "task.delegate").message, { code: e.code });
      },
      requestApproval: async (body: Record<string, unknown>, digest: string) => {
        let token: string;
        try {
          token = await this.attemptToken(this.hard);
        } catch (e) {
          throw notDone(`approval request of task ${id} not recorded`, e);
        }
        const r = await this.svc.command<CommandResult>(
          "task.request_approval",
          { ...body, task_id: id, attempt, token },
          { commandId: `approval.${id}.${attempt}.${digest.slice("sha256:".length)}`, signal: this.hard },
        );
        if (r.ok) {
          if (r.result?.approval_id) return r.result.approval_id;
          // Recorded, but the reply (a duplicate's) does not name the approval: the task does.
          const { task } = await this.readTask(id, (t) =>
            (t.approvals ?? []).some((x) => x.attempt === attempt && x.action_digest === digest),
          );
          return task.approvals?.findLast((x) => x.attempt === attempt && x.action_digest === digest)?.id ?? "";
        }
        const e = r.error!;
        if (e.code === "conflict" || e.code === "not_found") throw await fenced("approval request", e);
        if (e.code === "invalid" || e.code === "too_large")
          throw new Permanent(new DwrError(e, "task.request_approval").message, { code: e.code });
        throw new DwrError(e, "task.request_approval");
      },
    };
  }

  /** report sends the attempt's outcome, then settles the item. */
  private async report(attempt: number, rep: Report, watch: Watch): Promise<void> {
    const id = this.item.task_id;
    if (rep.wait?.approvalId !== undefined || rep.wait?.goalId !== undefined) {
      // The request recorded the approval, or the delegation, which parked the attempt.
      this.ack();
      this.log("waiting", attempt, rep.wait.message);
      return;
    }
    const w = rep.wait;
    if (w && w.signalName === undefined && !(w.until instanceof Date && !Number.isNaN(w.until.getTime()))) {
      // A WaitError the handler made up: an approval or a delegation is asked for with job.requestApproval or job.delegate.
      rep = {
        failure: {
          code: SDKCode.InvalidResult,
          message: clip(`the handler parked the task with a wait the worker cannot send (${w.message})`, maxMessage),
          retryable: false,
        },
      };
    }
    // A wait needs the attempt claimed; a success or failure of a job that is not carries the claim instead.
    let auth: ReportAuth;
    try {
      auth = await this.reportAuth(rep.wait !== undefined);
    } catch (e) {
      if (this.lazyErr) await this.settleFenced(attempt, watch, (e as Error).message, true);
      else this.log("unsettled", attempt, (e as Error).message);
      return;
    }
    const base = auth.claim ? { task_id: id, attempt, claim: auth.claim } : { task_id: id, attempt, token: auth.token };
    // A report that carries its claim has an id per delivery: two deliveries of one item may both report
    // attempt n without a claim between them (a holder that hung before claiming, and the redelivery that
    // claimed n), and under one identity the same id would answer the hung one's with the other's outcome.
    const reportId = (kind: string) => (auth.claim ? `${kind}.${id}.${attempt}.${this.delivered}` : `${kind}.${id}.${attempt}`);
    let r: Reply | undefined;
    try {
      if (rep.wait) {
        const w = rep.wait;
        const body =
          w.signalName !== undefined
            ? { ...base, kind: "signal", signal: w.signalName }
            : { ...base, kind: "timer", until: w.until!.toISOString() };
        r = await this.svc.command("task.wait", body, { commandId: `wait.${id}.${attempt}`, signal: this.hard });
        if (!r.ok && r.error!.code === "invalid") {
          rep = {
            failure: {
              code: SDKCode.InvalidResult,
              message: clip("the service refused the wait: " + r.error!.message, maxMessage),
              retryable: false,
            },
          };
        }
      } else if (!rep.failure) {
        const raw =
          `{"task_id":${JSON.stringify(id)},"attempt":${attempt},` +
          (auth.claim ? `"claim":${JSON.stringify(auth.claim)}` : `"token":${JSON.stringify(auth.token)}`) +
          (rep.output !== undefined ? `,"result":${rep.output}` : "") +
          (rep.artifacts?.length ? `,"artifacts":${JSON.stringify(rep.artifacts)}` : "") +
          (rep.modelSteps?.length ? `,"model_steps":${JSON.stringify(rep.modelSteps)}` : "") +
          (this.askNext() ? `,"next":true` : "") +
          "}";
        r = await this.svc.command("task.succeed", new TextEncoder().encode(raw), {
          commandId: reportId("succeed"),
          signal: this.hard,
        });
        if (!r.ok && (r.error!.code === "invalid" || r.error!.code === "too_large")) {
          rep = {
            failure: {
              code: SDKCode.InvalidResult,
              message: clip("the service refused the result: " + r.error!.message, maxMessage),
              retryable: false,
            },
            modelSteps: rep.modelSteps,
          };
        }
      }
      if (rep.failure) {
        const f = rep.failure;
        r = await this.svc.command(
          "task.fail",
          {
            ...base,
            error: { code: f.code, message: f.message },
            retryable: f.retryable,
            model_steps: rep.modelSteps,
            next: this.askNext() || undefined,
          },
          { commandId: reportId("fail"), signal: this.hard },
        );
      }
    } catch (e) {
      this.log("unsettled", attempt, (e as Error).message);
      return;
    }
    if (r!.ok) {
      this.ack();
      const cr = r!.result as CommandResult | undefined;
      const next = rep.wait ? undefined : cr?.next;
      if (typeof next === "object" && next !== null && next.token && typeof next.item === "object" && next.item !== null) {
        this.next = next; // the handoff: run once this delivery ends (worker.ts's runHanded)
      }
      if (auth.claim && cr && cr.attempt !== attempt) {
        // The report's claim failed the task instead of starting the attempt (its goal's budget or its
        // attempts were spent), as a claim would have: the report was not recorded.
        this.log("refused", attempt, `the report's claim started no attempt; task is ${cr.state}`);
        return;
      }
      this.log(
        rep.wait ? "waiting" : rep.failure ? (rep.failure.retryable ? "failed" : "failed_permanently") : "succeeded",
        attempt,
      );
      return;
    }
    const e = r!.error!;
    if (e.code === "conflict" || e.code === "not_found") {
      await this.settleFenced(attempt, watch, e.message, auth.claim !== undefined);
      return;
    }
    // Refused for another reason: left to be redelivered, so that a later attempt supersedes this one.
    this.c.log.error(`dwr: report of task ${id} attempt ${attempt} refused: ${e.code}: ${e.message}`);
    this.log("unsettled", attempt, "report refused: " + e.code);
  }

  /**
   * settleFenced settles the item of an attempt whose report was refused as
   * no longer holding the task — or, when unclaimed, of a job that never
   * started its attempt and found the task no longer ready for it:
   * acknowledged, unless a redelivery of it now runs an attempt of its own
   * (an ack would take the item from under it).
   */
  private async settleFenced(attempt: number, watch: Watch, why: string, unclaimed: boolean) {
    if (!watch.ended) {
      try {
        const { task, caughtUp } = await this.readTask(this.item.task_id, (t) =>
          unclaimed ? t.state !== "ready" || attemptCount(t) + 1 !== attempt : running(t)?.n !== attempt,
        );
        if (!caughtUp) {
          this.log("unsettled", attempt, "the views still show the task as the service refused it");
          return;
        }
        const a = runningFromItem(task, this.item.attempt);
        if (a && (a.n > attempt || unclaimed)) {
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
        // Sealed with another key than the queue's (or its key was not handed): the task's payloads are
        // read opened from the service. The item left before the views applied the result it judges: read
        // them as of its record. Its result_digest stays the item's (the one the service compares).
        const t = await this.getTask(it.task_id, undefined, it.seq);
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
        putArtifact: async (name, bytes) => refOf(await putArtifact(this.svc, bytes, { name, taskId: it.task_id }, this.hard)),
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
      if (!v || !["PASS", "FAIL", "INCONCLUSIVE"].includes(v.outcome))
        bad = `outcome "${v?.outcome}" is not PASS, FAIL or INCONCLUSIVE`;
      else if (evidence !== undefined && Buffer.byteLength(evidence) > MaxPayloadBytes)
        bad = `the evidence is ${Buffer.byteLength(evidence)} bytes; at most ${MaxPayloadBytes} are allowed (store it as an artifact)`;
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

/**
 * jobSpan starts the span of a job on queue, "dwr.job <queue>", a child of parent (the trace its item
 * carries), and returns it with its trace context: what the job's commands carry.
 */
function jobSpan(tracer: Tracer, queue: string, parent?: TraceContext): [Span, TraceContext] {
  let ctx = ROOT_CONTEXT;
  const m = parent && traceparentRe.exec(parent.traceparent); // traceContextOf checked it
  if (m) {
    const sc: SpanContext = { traceId: m[2]!, spanId: m[3]!, traceFlags: parseInt(m[4]!, 16), isRemote: true };
    if (parent?.tracestate) sc.traceState = createTraceState(parent.tracestate);
    ctx = trace.setSpanContext(ctx, sc);
  }
  const span = tracer.startSpan(`dwr.job ${queue}`, { kind: SpanKind.CONSUMER }, ctx);
  const sc = span.spanContext();
  const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, "0");
  const tc: TraceContext = { traceparent: `00-${sc.traceId}-${sc.spanId}-${flags}` };
  if (sc.traceState) tc.tracestate = sc.traceState.serialize();
  return [span, tc];
}
