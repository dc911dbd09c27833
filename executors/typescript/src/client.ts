import { connect, type NatsConnection } from "@nats-io/transport-node";
import { getArtifact, putArtifact, type ArtifactInfo, type ArtifactMeta } from "./artifacts.js";
import { canonicalAt, digestOf } from "./canonical.js";
import { credentialOptions } from "./credentials.js";
import { readSigningKey, signDecision, type SigningKey } from "./signing.js";
import { DwrError } from "./errors.js";
import { Service, decodeReply, resultOf, traceContextOf, type CallOptions } from "./service.js";
import {
  EnvTraceparent,
  Header,
  type CommandResult,
  type ConfigureQueue,
  type Goal,
  type Queue,
  type Task,
  type TaskSpec,
} from "./wire.js";

/** Options of Client.connect. */
export interface ConnectOptions {
  /** The credential file to connect with (what `dwr users add --out FILE` writes). */
  creds?: string;
  /** The workspace addressed; default "default". */
  workspace?: string;
  /** The first token of every subject; default "dwr". */
  prefix?: string;
  /** The connection's name, as the server shows it. */
  name?: string;
  /** The trace its requests belong to (see ClientOptions.traceparent). */
  traceparent?: string;
  tracestate?: string;
}

/** Options of new Client. */
export interface ClientOptions {
  /** The workspace addressed; default "default". */
  workspace?: string;
  /** The first token of every subject; default "dwr". */
  prefix?: string;
  /** close() closes the connection too. */
  owned?: boolean;
  /**
   * The W3C traceparent every request carries (header `traceparent`), so that the service's spans of
   * them join that trace — a job's (`job.traceparent`), or the caller's own; a request's
   * `CallOptions.traceparent` overrides it. Default: the environment variable TRACEPARENT (what a job hands a
   * process it starts), if set. A value that is not a valid traceparent is ignored.
   */
  traceparent?: string;
  /** The W3C tracestate sent with traceparent. */
  tracestate?: string;
}

/** A goal and its first plan: goal.create's body. */
export interface CreateGoal {
  goal_id?: string;
  title: string;
  description?: string;
  success_criteria?: string[];
  envelope?: Record<string, unknown>;
  /** The goal's labels (name: value), which goals({ labels }) selects by and labelGoal changes. */
  labels?: Record<string, string>;
  /**
   * The goal's priority, 1 (first) to 5 (last; absent: 3): the turn, in a queue whose order is priority, of its
   * tasks that give none of their own; prioritizeGoal changes it.
   */
  priority?: number;
  /**
   * The caller's own name for the goal (an order id: 1-128 letters, digits, '_', '.' or '-', starting with a
   * letter or digit), which goalByKey reads it by. While an open goal holds the key, another createGoal with it
   * is refused (DwrError code "conflict", field "/key") or, with if_open "use", answered with that open goal
   * (duplicate: true, its id).
   */
  key?: string;
  /** What createGoal does while an open goal holds key: "refuse" (absent: refuse) or "use" that goal. */
  if_open?: "refuse" | "use";
  tasks?: TaskSpec[];
}

/** The goal states that end it. */
const goalEnded = (s: string) => s === "achieved" || s === "failed" || s === "cancelled";

/**
 * Client starts work and follows it: dwr's commands and queries for callers.
 * A command carries a fresh command id unless `commandId` gives one, and is
 * sent again with that id when no reply came or the service was
 * unavailable, until `signal` aborts (default: 30 s): a retry is answered
 * with the first outcome. A refusal is thrown as a DwrError (its code,
 * message and field).
 *
 *     const c = await Client.connect("nats://localhost:4222", { creds: "caller.creds" });
 *     const t = await c.createTask({ queue: "payments", input: { invoice: "i-1" } });
 *     const task = await c.task(t.id);
 *     await c.close();
 */
export class Client {
  readonly svc: Service;
  private readonly owned: boolean;

  /** new Client(nc) uses a connection the caller opened (and closes). */
  constructor(
    readonly nc: NatsConnection,
    opts: ClientOptions = {},
  ) {
    const trace =
      opts.traceparent !== undefined
        ? traceContextOf(opts.traceparent, opts.tracestate)
        : traceContextOf(process.env[EnvTraceparent]);
    this.svc = new Service(nc, opts.workspace ?? "default", opts.prefix ?? "dwr", trace);
    this.owned = opts.owned ?? false;
  }

  /** The traceparent the client's requests carry, if any. */
  get traceparent(): string | undefined {
    return this.svc.trace?.traceparent;
  }

  /** connect opens a connection to the NATS server at url (reconnecting forever) with the credential, and returns its Client. */
  static async connect(url: string | string[], opts: ConnectOptions = {}): Promise<Client> {
    const nc = await connect({
      servers: url,
      name: opts.name,
      maxReconnectAttempts: -1,
      pingInterval: 2000,
      maxPingOut: 2,
      ...(opts.creds ? credentialOptions(opts.creds) : {}),
    });
    return new Client(nc, {
      workspace: opts.workspace,
      prefix: opts.prefix,
      owned: true,
      traceparent: opts.traceparent,
      tracestate: opts.tracestate,
    });
  }

  /** close closes the connection when connect opened it. */
  async close(): Promise<void> {
    if (this.owned) await this.nc.close();
  }

  private withDefaults(opts: CallOptions): CallOptions {
    return { ...opts, signal: opts.signal ?? AbortSignal.timeout(30000) };
  }

  /** command sends any command by name and returns its result; a refusal is thrown as a DwrError. */
  async command<T = CommandResult>(name: string, body: unknown, opts: CallOptions = {}): Promise<T> {
    return resultOf(await this.svc.command<T>(name, body, this.withDefaults(opts)), name);
  }

  /** query sends any query by name and returns its result, reading at least this client's own writes. */
  async query<T = unknown>(name: string, body: unknown, opts: CallOptions = {}): Promise<T> {
    return resultOf(await this.svc.query<T>(name, body, this.withDefaults(opts)), name);
  }

  /** createGoal creates a goal, with its first plan when goal.tasks is given (one commit). */
  createGoal(goal: CreateGoal, opts?: CallOptions): Promise<CommandResult> {
    return this.command("goal.create", goal, opts);
  }

  /** submitPlan submits a plan of the goal, or a later version that revises it. */
  submitPlan(goalId: string, tasks: TaskSpec[], opts?: CallOptions): Promise<CommandResult> {
    return this.command("plan.submit", { goal_id: goalId, tasks }, opts);
  }

  /** cancelGoal cancels a goal and every task of its plan that has not ended. */
  cancelGoal(goalId: string, reason?: string, opts?: CallOptions): Promise<CommandResult> {
    return this.command("goal.cancel", { goal_id: goalId, reason }, opts);
  }

  /**
   * labelGoal gives a goal the labels of change.set (one already there takes the new value) and takes away
   * those change.remove names, whatever the goal's state. A change that leaves its labels as they are
   * records nothing (the result's `duplicate`).
   */
  async labelGoal(
    goalId: string,
    change: { set?: Record<string, string>; remove?: string[] },
    opts?: CallOptions,
  ): Promise<CommandResult> {
    return this.label("goal", goalId, change, opts);
  }

  /**
   * prioritizeGoal sets a goal's priority, 1 (first) to 5 (last): its tasks that give none of their own take
   * their turn by it in a queue whose order is priority, those waiting at once. The same priority again
   * records nothing (the result's `duplicate`).
   */
  prioritizeGoal(goalId: string, priority: number, opts?: CallOptions): Promise<CommandResult> {
    return this.command("goal.prioritize", { goal_id: goalId, priority }, opts);
  }

  /** labelTask is labelGoal for a task. */
  async labelTask(
    taskId: string,
    change: { set?: Record<string, string>; remove?: string[] },
    opts?: CallOptions,
  ): Promise<CommandResult> {
    return this.label("task", taskId, change, opts);
  }

  private async label(
    what: "goal" | "task",
    id: string,
    change: { set?: Record<string, string>; remove?: string[] },
    opts?: CallOptions,
  ): Promise<CommandResult> {
    const set = change.set && Object.keys(change.set).length ? change.set : undefined;
    const remove = change.remove?.length ? change.remove : undefined;
    if (!set && !remove) throw new Error(`dwr: label${what === "goal" ? "Goal" : "Task"}: give labels to set or names to remove`);
    return this.command(`${what}.label`, { [`${what}_id`]: id, set, remove }, opts);
  }

  /** createTask creates a standalone task (with the id taskId gives, if any, and the labels labels gives). */
  createTask(
    spec: TaskSpec,
    opts: CallOptions & { taskId?: string; labels?: Record<string, string> } = {},
  ): Promise<CommandResult> {
    const { taskId, labels, ...call } = opts;
    return this.command("task.create", { spec, task_id: taskId, labels }, call);
  }

  /** cancelTask cancels a task: its running attempt's executor is told. */
  cancelTask(taskId: string, reason?: string, opts?: CallOptions): Promise<CommandResult> {
    return this.command("task.cancel", { task_id: taskId, reason }, opts);
  }

  /** signal sends the signal name to a task (kept until the task waits for it). */
  signal(taskId: string, name: string, payload?: unknown, opts?: CallOptions): Promise<CommandResult> {
    return this.command("task.signal", { task_id: taskId, name, payload }, opts);
  }

  /**
   * runRitual creates a goal and its first plan, in one commit, from a version of the ritual name (absent: the
   * latest) with r.params in place of its parameters (one left out takes its schema's default), as createGoal
   * with tasks would. r.labels are set on the goal over those of the ritual's goal template, r.key (createGoal's
   * key) over the one it renders, and r.if_open ("refuse", the default, or "use") says what the run does while
   * an open goal holds the key. The result names the goal (`id`) and its tasks, as createGoal's does; a param
   * that fails the ritual's parameters schema is a DwrError with code "invalid", field "/params/<name>".
   */
  runRitual(
    name: string,
    r: {
      params?: Record<string, unknown>;
      version?: number;
      labels?: Record<string, string>;
      key?: string;
      if_open?: "refuse" | "use";
    } = {},
    opts?: CallOptions,
  ): Promise<CommandResult> {
    const labels = r.labels && Object.keys(r.labels).length ? r.labels : undefined;
    return this.command(
      "ritual.run",
      { name, version: r.version, params: r.params, labels, key: r.key, if_open: r.if_open },
      opts,
    );
  }

  /**
   * configureQueue sets a queue's settings (queue.configure, a workspace admin's): its lease (lease_ms, default
   * 30000) and deliveries before quarantine (max_deliver, default 5), and, when given, how many of its jobs may
   * run at once (max_running), how many may be handed out in any rate_period_ms (rate_limit; -1 removes either
   * limit) and in which order (order); what is left out of those keeps the queue's as it is. With if_unset, a
   * queue already configured keeps its settings. The result carries the settings in effect (queue, lease_ms,
   * max_deliver, max_running, rate_limit, rate_period_ms, order, paused), and `duplicate` when nothing changed.
   */
  configureQueue(q: ConfigureQueue, opts?: CallOptions): Promise<CommandResult> {
    return this.command(
      "queue.configure",
      {
        queue: q.queue,
        lease_ms: q.lease_ms ?? 30000,
        max_deliver: q.max_deliver ?? 5,
        max_running: q.max_running,
        rate_limit: q.rate_limit,
        rate_period_ms: q.rate_period_ms,
        order: q.order,
        if_unset: q.if_unset || undefined,
      },
      opts,
    );
  }

  /**
   * pauseQueue pauses a queue (queue.pause, a workspace admin's): it hands out no job, and no report hands its
   * sender the queue's next task, until resumeQueue; the jobs already handed out run on, and tasks keep joining
   * it. The result's `paused` is true, with the queue's settings in effect as configureQueue's.
   */
  pauseQueue(queue: string, opts?: CallOptions): Promise<CommandResult> {
    return this.command("queue.pause", { queue }, opts);
  }

  /** resumeQueue lets a paused queue hand out its jobs again (queue.resume), those that joined it meanwhile first. */
  resumeQueue(queue: string, opts?: CallOptions): Promise<CommandResult> {
    return this.command("queue.resume", { queue }, opts);
  }

  /**
   * deleteQueue removes a queue that no task that has not ended is given (queue.delete, a workspace admin's): its
   * consumer and its settings, so that it no longer counts against the workspace's bound on queues.
   */
  deleteQueue(queue: string, opts?: CallOptions): Promise<CommandResult> {
    return this.command("queue.delete", { queue }, opts);
  }

  /** task reads a task. */
  task(id: string, opts?: CallOptions): Promise<Task> {
    return this.query<Task>("task.get", { id }, opts);
  }

  /** goal reads a goal's view: its state, plan and tasks. */
  goal(id: string, opts?: CallOptions): Promise<Goal> {
    return this.query<Goal>("goal.get", { id }, opts);
  }

  /**
   * goalByKey reads the goal made last with key (createGoal's key), open or ended, as goal does; none is a
   * DwrError with code "not_found".
   */
  goalByKey(key: string, opts?: CallOptions): Promise<Goal> {
    return this.query<Goal>("goal.get", { key }, opts);
  }

  /**
   * list reads a list query page after page (following each reply's
   * `next`), yielding its items: `for await (const t of c.list<Task>("task.list", { goal_id }))`.
   * `limit` sets the page size (at most 10,000).
   */
  async *list<T = unknown>(name: string, q: Record<string, unknown> = {}, opts: CallOptions = {}): AsyncGenerator<T> {
    let after: string | undefined;
    for (;;) {
      const r = await this.svc.query<T[]>(name, { ...q, after }, this.withDefaults(opts));
      for (const item of resultOf(r, name) ?? []) yield item;
      if (!r.next) return;
      after = r.next;
    }
  }

  /** tasks lists the workspace's tasks: of a goal, in a state, of a queue, or all of them. */
  tasks(
    filter: { goalId?: string; state?: string; queue?: string; labels?: Record<string, string>; limit?: number } = {},
    opts?: CallOptions,
  ): AsyncGenerator<Task> {
    const labels = filter.labels && Object.keys(filter.labels).length ? filter.labels : undefined;
    return this.list<Task>(
      "task.list",
      { goal_id: filter.goalId, state: filter.state, queue: filter.queue, labels, limit: filter.limit },
      opts,
    );
  }

  /**
   * goals lists the workspace's goals, oldest first (the newest with newestFirst; of a state, those a
   * schedule's slots started, and those holding every one of labels with its value, when given).
   */
  goals(
    filter: { state?: string; schedule?: string; labels?: Record<string, string>; newestFirst?: boolean; limit?: number } = {},
    opts?: CallOptions,
  ): AsyncGenerator<Goal> {
    return this.list<Goal>(
      "goal.list",
      {
        state: filter.state,
        schedule: filter.schedule,
        labels: filter.labels,
        newest_first: filter.newestFirst || undefined,
        limit: filter.limit,
      },
      opts,
    );
  }

  /**
   * queues lists the workspace's queues (queue.list): those configured, then those that stand without a
   * configuration, each with its settings and its work items pending, in flight, and its executors' pulls waiting
   * (items pending, none in flight and no pull waiting mean no executor takes the queue).
   */
  queues(opts?: CallOptions): AsyncGenerator<Queue> {
    return this.list<Queue>("queue.list", {}, opts);
  }

  /**
   * waitGoal waits until the goal has ended (achieved, failed or cancelled)
   * and returns it: it reads the goal again at each of its events on the
   * feed — with the event's log sequence (its Dwr-Log-Seq header) as the
   * read's minSeq, so that the read sees the state the event left — and
   * every pollMs (default 2 s) in case the feed missed one, until signal
   * aborts (default: none).
   */
  async waitGoal(id: string, opts: { signal?: AbortSignal; pollMs?: number } = {}): Promise<Goal> {
    let wake: (() => void) | undefined;
    let woken = false;
    let seen = 0;
    const sub = this.nc.subscribe(`${this.svc.prefix}.ev.${this.svc.workspace}.goal.${id}.*`, {
      callback: (_err, m) => {
        const seq = Number(m?.headers?.get(Header.LogSeq) ?? 0);
        if (Number.isSafeInteger(seq) && seq > seen) seen = seq;
        woken = true;
        wake?.();
      },
    });
    const onAbort = () => wake?.();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await this.nc.flush();
      for (;;) {
        opts.signal?.throwIfAborted();
        woken = false;
        const g = await this.goal(id, { signal: opts.signal, minSeq: seen || undefined });
        if (goalEnded(g.state)) return g;
        if (!woken) {
          await new Promise<void>((resolve) => {
            const t = setTimeout(resolve, opts.pollMs ?? 2000);
            wake = () => {
              clearTimeout(t);
              resolve();
            };
          });
          wake = undefined;
        }
      }
    } finally {
      sub.unsubscribe();
      opts.signal?.removeEventListener("abort", onAbort);
    }
  }

  /**
   * decideApproval decides an approval as an approver: it reads the
   * approval, checks that its action has the digest the approval names
   * (else it signs nothing and throws), signs (approval id, response,
   * digest) with the approver's Ed25519 key — a key file as `dwr keys
   * create` writes it, or a SigningKey — and sends approval.decide. The
   * approver defaults to the one the key file names. A refusal (an
   * approver of another role, a key not registered, a response not
   * permitted) is a DwrError.
   */
  async decideApproval(
    approvalId: string,
    response: string,
    key: string | SigningKey,
    opts: CallOptions & { approver?: string; comment?: string } = {},
  ): Promise<CommandResult> {
    const { approver, comment, ...call } = opts;
    const k = typeof key === "string" ? readSigningKey(key) : key;
    const who = approver ?? k.approver;
    if (!who) throw new Error("dwr: decideApproval: the key file names no approver: give opts.approver");
    // The action's digest from the reply's bytes: decoded to numbers and
    // written again, 1e21 would digest as 1e+21.
    const name = "approval.get";
    const data = await this.svc.queryBytes(name, { id: approvalId }, this.withDefaults(call));
    const a = resultOf(decodeReply<{ id: string; action_digest: string }>(data, name), name);
    const digest = digestOf(canonicalAt(new TextDecoder().decode(data), ["result", "action"]));
    if (digest !== a.action_digest) {
      throw new Error(
        `dwr: approval ${a.id} names action digest ${a.action_digest}, but the action shown digests to ${digest}: not signing`,
      );
    }
    return this.command(
      "approval.decide",
      {
        approval_id: a.id,
        approver: who,
        response,
        action_digest: digest,
        comment,
        signature: signDecision(k.key, a.id, response, digest),
      },
      call,
    );
  }

  /** putArtifact stores bytes in the workspace's artifact store. */
  putArtifact(bytes: Uint8Array | string, meta: ArtifactMeta = {}, signal?: AbortSignal): Promise<ArtifactInfo> {
    return putArtifact(this.svc, bytes, meta, signal);
  }

  /** getArtifact reads an artifact by its digest, checked against it. */
  getArtifact(sha256: string, opts: { signal?: AbortSignal; maxBytes?: number } = {}): Promise<Uint8Array> {
    return getArtifact(this.svc, sha256, opts);
  }
}

export { DwrError };
