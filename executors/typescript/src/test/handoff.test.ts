// Unit tests of the handoff (worker.ts's runHanded, delivery.ts's askNext):
// a worker's report asks for the next task of its chain (`next: true`), and
// an attempt the service hands it in the reply runs at once, in the same
// slot, without a claim or a work item — its heartbeats carry its token, and
// its own report asks again. The service is a fake NATS connection that
// answers each command as the service would; the work item a fake JetStream
// message. The Go-driven tests in integration/ run the SDK against a real
// service.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import type { JsMsg } from "@nats-io/jetstream";
import { SpanKind } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import type { MsgHdrs, NatsConnection } from "@nats-io/transport-node";
import { Permanent, Verifier, Worker, type Handoff, type Job, type Reply, type WorkItem } from "../index.js";

const workspace = "default";
const queue = "steps";
const executor = "ts-1";
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/** One request the worker sent: its command (or query) name, body, command id and trace. */
interface Sent {
  name: string;
  query: boolean;
  body: Record<string, unknown>;
  commandId: string;
  traceparent: string;
}

/** fakeService answers the worker's requests with answer (an unexpected one is refused), recording them. */
function fakeService(answer: (name: string, body: Record<string, unknown>) => Reply | undefined) {
  const sent: Sent[] = [];
  const nc = {
    isClosed: () => false,
    async request(subject: string, data: Uint8Array, opts: { headers?: MsgHdrs }) {
      const [, kind, , ...name] = subject.split(".");
      const s: Sent = {
        name: name.join("."),
        query: kind === "q",
        body: JSON.parse(new TextDecoder().decode(data)),
        commandId: opts.headers?.get("Dwr-Command-Id") ?? "",
        traceparent: opts.headers?.get("traceparent") ?? "",
      };
      sent.push(s);
      await new Promise((r) => setImmediate(r));
      const r = answer(s.name, s.body) ?? { ok: false, error: { code: "internal", message: `unexpected ${s.name}` } };
      return { data: new TextEncoder().encode(JSON.stringify(r)) };
    },
  } as unknown as NatsConnection;
  return { nc, sent, commands: () => sent.filter((s) => !s.query) };
}

/** fakeMsg returns a first delivery of item, fresh from the stream, in the trace traceparent, counting its acks, naks and in-progress acks. */
function fakeMsg(item: WorkItem) {
  const n = { acks: 0, naks: 0, working: 0 };
  const msg = {
    data: new TextEncoder().encode(JSON.stringify(item)),
    headers: { get: (k: string) => (k === "traceparent" ? traceparent : "") },
    info: { deliveryCount: 1 },
    time: new Date(),
    ack: () => n.acks++,
    nak: () => n.naks++,
    working: () => n.working++,
  } as unknown as JsMsg;
  return { msg, n };
}

/** readyItem is the work item of task id (plan key), ready for its first attempt, as the stream carries it. */
function readyItem(id: string, key: string, q = queue): WorkItem {
  return {
    kind: "execute",
    task_id: id,
    workspace,
    queue: q,
    attempt: 1,
    operation_key: "op-" + id,
    task: { id, workspace, key, spec: { queue: q }, state: "ready" },
    seq: 1,
  };
}

/** handoff hands attempt 1 of task id (plan key), which depends on dep, as a report's reply would: the ready item, started. */
function handoff(id: string, key: string, dep: { id: string; key: string }, q = queue): Handoff {
  const token = randomBytes(32).toString("base64url");
  const started = { n: 1, executor, operation_key: "op-" + id, state: "running", started_at: new Date().toISOString() };
  const ready = readyItem(id, key, q);
  return {
    task_id: id,
    attempt: 1,
    token_hash: "hash-of-" + id,
    token,
    item: {
      ...ready,
      task: { ...ready.task!, depends_on: [dep.id], state: "running", attempts: [started] },
      dependencies: [{ key: dep.key, task_id: dep.id, result: dep.key }],
      seq: 2,
    },
  };
}

const ok = (result: Record<string, unknown>): Reply => ({ ok: true, seq: 1, result: { version: 1, ...result } });

/** deliver hands msg to the worker as its fetch loop does, and resolves once the slot is free again. */
const deliver = (w: Worker, msg: JsMsg) => (w as unknown as { deliver(m: JsMsg): Promise<void> }).deliver(msg);

/** logs returns a logger that keeps the worker's lines. */
function logs() {
  const lines: string[] = [];
  const line = (msg: string, ...args: unknown[]) => lines.push([msg, ...args.map(String)].join(" "));
  return { lines, logger: { debug() {}, info: line, warn: line, error: line } };
}

test(
  "a report asks for the handoff, and the attempt it is handed runs in the same slot: no claim, no item, heartbeats with its token, its own report asks again",
  { timeout: 10_000 },
  async () => {
    const [a, b, c] = ["T-a", "T-b", "T-c"];
    const toB = handoff(b, "b", { id: a, key: "a" });
    const toC = handoff(c, "c", { id: b, key: "b" });
    let beaten!: () => void;
    const beat = new Promise<void>((r) => (beaten = r));
    const svc = fakeService((name, body) => {
      if (name === "task.succeed" && body.task_id === a) return ok({ id: a, state: "accepted", attempt: 1, next: toB });
      if (name === "task.heartbeat" && body.task_id === b) {
        beaten();
        return ok({ id: b });
      }
      if (name === "task.succeed" && body.task_id === b) return ok({ id: b, state: "accepted", attempt: 1, next: toC });
      if (name === "task.fail" && body.task_id === c) return ok({ id: c, state: "failed", attempt: 1 });
      return undefined;
    });
    const { msg, n } = fakeMsg(readyItem(a, "a"));
    const ran: { key?: string; deps: string[]; acked: number; traceparent?: string }[] = [];
    const w = new Worker({ nc: svc.nc, queue, executor, version: "test-1", leaseMs: 1000 }, async (job: Job) => {
      ran.push({
        key: job.key,
        deps: Object.values(job.dependencies).map((d) => `${d.key}=${d.result}`),
        acked: n.acks,
        traceparent: job.traceparent,
      });
      if (job.key === "b") await beat; // it runs past a heartbeat moment (lease/3)
      if (job.key === "c") throw new Permanent("c gives up", { code: "gave_up" });
      return { output: job.key };
    });

    await deliver(w, msg);

    assert.deepEqual(
      ran.map((r) => [r.key, r.deps]),
      [
        ["a", []],
        ["b", ["a=a"]],
        ["c", ["b=b"]],
      ],
      "the chain ran on this worker, each handed job with its dependency's result from its item",
    );
    assert.equal(ran[1]!.acked, 1, "the item was acknowledged once its report was answered, before the handed job ran");
    assert.deepEqual(n, { acks: 1, naks: 0, working: 0 }, "the handed attempts have no item to renew or acknowledge");
    for (const r of ran) assert.equal(r.traceparent, traceparent, "every job runs in the item's trace");

    const cmds = svc.commands();
    assert.equal(svc.sent.length, cmds.length, "nothing was read");
    assert.ok(!cmds.some((s) => s.name === "task.claim"), "no claim: the handed attempts were started for the worker");
    const names = cmds.map((s) => s.name).filter((x, i, all) => x !== "task.heartbeat" || all[i - 1] !== x);
    assert.deepEqual(names, ["task.succeed", "task.heartbeat", "task.succeed", "task.fail"]);

    const [ra, ...rest] = cmds;
    assert.deepEqual(ra!.body, {
      task_id: a,
      attempt: 1,
      claim: { executor, executor_version: "test-1" },
      result: "a",
      next: true,
    });
    const beats = rest.filter((s) => s.name === "task.heartbeat");
    assert.ok(beats.length >= 1);
    for (const hb of beats) assert.deepEqual(hb.body, { task_id: b, attempt: 1, token: toB.token });
    const rb = rest.find((s) => s.name === "task.succeed")!;
    assert.deepEqual(rb.body, { task_id: b, attempt: 1, token: toB.token, result: "b", next: true }, "its own report asks again");
    assert.equal(rb.commandId, `succeed.${b}.1`);
    const rc = rest.find((s) => s.name === "task.fail")!;
    assert.deepEqual(rc.body, {
      task_id: c,
      attempt: 1,
      token: toC.token,
      error: { code: "gave_up", message: "c gives up" },
      retryable: false,
      next: true,
    });
    assert.equal(rc.commandId, `fail.${c}.1`);
    for (const s of cmds) assert.equal(s.traceparent, traceparent, `${s.name} carries the item's trace`);
  },
);

test("a report asks for no handoff once the worker stops, nor with noHandoff", { timeout: 10_000 }, async () => {
  const svc = fakeService((name, body) =>
    name === "task.succeed" || name === "task.fail" ? ok({ id: body.task_id, state: "accepted", attempt: 1 }) : undefined,
  );
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const w = new Worker({ nc: svc.nc, queue, executor, leaseMs: 1000 }, async () => {
    started();
    await gate;
    return { output: 1 };
  });
  const { msg, n } = fakeMsg(readyItem("T-stop", "s"));
  const done = deliver(w, msg);
  await running;
  await w.stop(); // the job runs on, draining
  release();
  await done;
  assert.deepEqual(
    svc.commands().map((s) => [s.name, s.body.next]),
    [["task.succeed", undefined]],
  );
  assert.equal(n.acks, 1);

  const off = fakeService((name, body) =>
    name === "task.succeed" || name === "task.fail" ? ok({ id: body.task_id, state: "accepted", attempt: 1 }) : undefined,
  );
  const nw = new Worker({ nc: off.nc, queue, executor, leaseMs: 1000, noHandoff: true }, (job: Job) => {
    if (job.key === "f") throw new Error("failed on purpose");
    return { output: 1 };
  });
  await deliver(nw, fakeMsg(readyItem("T-ok", "ok")).msg);
  await deliver(nw, fakeMsg(readyItem("T-f", "f")).msg);
  assert.deepEqual(
    off.commands().map((s) => [s.name, s.body.task_id, "next" in s.body]),
    [
      ["task.succeed", "T-ok", false],
      ["task.fail", "T-f", false],
    ],
  );
});

test("a report of an item sealed with a key the worker does not hold asks for the handoff too: it comes opened, as a claim's task does", async () => {
  const id = "T-sealed";
  const item = readyItem(id, "s");
  item.task!.spec.input = "dwr:sealed:1:g.01JGOAL0000000000000000000:c2VhbGVk"; // a goal's own key: read opened
  const svc = fakeService((name, body) => {
    if (name === "task.get")
      return { ok: true, result: { id, workspace, key: "s", spec: { queue, input: "opened" }, state: "ready" } };
    if (name === "task.succeed") return ok({ id: body.task_id, state: "accepted", attempt: 1 });
    return undefined;
  });
  const seen: unknown[] = [];
  const w = new Worker({ nc: svc.nc, queue, executor, leaseMs: 1000 }, (job: Job) => {
    seen.push(job.input);
    return { output: 1 };
  });
  await deliver(w, fakeMsg(item).msg);
  assert.deepEqual(seen, ["opened"], "the job ran on the task as the service reads it");
  assert.deepEqual(
    svc.sent.map((s) => [s.name, "next" in s.body]),
    [
      ["task.get", false],
      ["task.succeed", true],
    ],
  );
});

test("a verifier asks for no handoff", async () => {
  const svc = fakeService((name, body) => (name === "task.verify" ? ok({ id: body.task_id, state: "accepted" }) : undefined));
  const v = new Verifier({ nc: svc.nc, queue: "checks", executor: "check-1", leaseMs: 1000 }, () => ({ outcome: "PASS" }));
  const { msg, n } = fakeMsg({
    kind: "verify",
    task_id: "T-v",
    workspace,
    queue: "checks",
    attempt: 1,
    operation_key: "op-T-v",
    input: {},
    result: "r",
    result_digest: "sha256:" + "0".repeat(64),
  });
  await deliver(v, msg);
  assert.deepEqual(
    svc.commands().map((s) => [s.name, "next" in s.body]),
    [["task.verify", false]],
  );
  assert.equal(n.acks, 1);
});

test("a handoff without its token or item, or that is not this worker's to run, runs nothing", async () => {
  const noToken: Handoff = { ...handoff("T-b", "b", { id: "T-a", key: "a" }), token: undefined };
  const noItem: Handoff = { ...handoff("T-b", "b", { id: "T-a", key: "a" }), item: undefined };
  const elsewhere = handoff("T-b", "b", { id: "T-a", key: "a" }, "other");
  const hands = [noToken, noItem, elsewhere];
  const svc = fakeService((name, body) =>
    name === "task.succeed" ? ok({ id: body.task_id, state: "accepted", attempt: 1, next: hands.shift() }) : undefined,
  );
  const { lines, logger } = logs();
  const ran: string[] = [];
  const w = new Worker({ nc: svc.nc, queue, executor, leaseMs: 1000, logger }, (job: Job) => {
    ran.push(job.taskId);
    return { output: 1 };
  });
  for (let i = 0; i < 3; i++) await deliver(w, fakeMsg(readyItem("T-a", "a")).msg);
  assert.deepEqual(ran, ["T-a", "T-a", "T-a"], "no handed job ran");
  assert.deepEqual(
    svc.commands().map((s) => s.name),
    ["task.succeed", "task.succeed", "task.succeed"],
  );
  const cannot = lines.filter((l) => l.includes("a handed attempt this worker cannot run"));
  assert.equal(cannot.length, 1, lines.join("\n"));
  assert.match(cannot[0]!, /task T-b attempt 1.*an item of default\/other/);
});

test("with a tracer, each job is a span in its item's trace, and its commands are in the span", { timeout: 10_000 }, async () => {
  const [a, b] = ["T-a", "T-b"];
  const toB = handoff(b, "b", { id: a, key: "a" });
  const svc = fakeService((name, body) => {
    if (name === "task.succeed" && body.task_id === a) return ok({ id: a, state: "accepted", attempt: 1, next: toB });
    if (name === "task.succeed" && body.task_id === b) return ok({ id: b, state: "accepted", attempt: 1 });
    return undefined;
  });
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const seen: (string | undefined)[] = [];
  const w = new Worker({ nc: svc.nc, queue, executor, leaseMs: 1000, tracer: provider.getTracer("test") }, async (job: Job) => {
    seen.push(job.traceparent);
    return { output: job.key };
  });

  await deliver(w, fakeMsg(readyItem(a, "a")).msg);

  const spans = exporter.getFinishedSpans();
  assert.deepEqual(
    spans.map((s) => [s.name, s.kind]),
    [
      [`dwr.job ${queue}`, SpanKind.CONSUMER],
      [`dwr.job ${queue}`, SpanKind.CONSUMER],
    ],
    "a span per job, the handed one's too, ended",
  );
  const [sa, sb] = spans;
  const [, traceId, parentId] = traceparent.split("-");
  assert.equal(sa!.spanContext().traceId, traceId, "in the item's trace");
  assert.equal(sa!.parentSpanContext?.spanId, parentId, "a child of the item's (the dispatch's) span");
  assert.equal(
    sb!.parentSpanContext?.spanId,
    sa!.spanContext().spanId,
    "the handed job: a child of the job whose report handed it",
  );
  const tpOf = (s: (typeof spans)[number]) => `00-${s.spanContext().traceId}-${s.spanContext().spanId}-01`;
  assert.deepEqual(seen, [tpOf(sa!), tpOf(sb!)], "job.traceparent is the job's span");
  const cmds = svc.commands();
  assert.equal(cmds[0]!.traceparent, tpOf(sa!), "the job's report is in its span");
  assert.equal(cmds[1]!.traceparent, tpOf(sb!));
});
