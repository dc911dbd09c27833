// The client's round trip against a real dwr serve, driven by
// integration/typescript_test.go (TestTypeScriptClient): it creates a goal
// with a plan that a Worker of this package runs, waits for it, lists it by
// its label and relabels it, signals and cancels a task, and reads a refusal
// as a DwrError. It prints what it saw as one JSON object, which the Go test
// checks against the log.
//
// Environment: DWR_SERVER, DWR_CREDS (a client's credential),
// DWR_EXECUTOR_CREDS (an executor's of queue E2E_QUEUE), E2E_QUEUE,
// DWR_APPROVER_CREDS and DWR_APPROVER_KEY (approver ada's, of role ops).
import { connect } from "@nats-io/transport-node";
import { Client, DwrError, Worker, credentialOptions, type Job } from "../index.js";

async function main() {
  const env = (k: string) => {
    const v = process.env[k];
    if (!v) throw new Error(k + " is not set");
    return v;
  };
  const server = env("DWR_SERVER");
  const queue = env("E2E_QUEUE");
  const out: Record<string, unknown> = {};
  const t0 = Date.now();
  const step = (what: string) => console.error(`client_e2e: ${Date.now() - t0} ms: ${what}`);

  const enc = await connect({ servers: server, maxReconnectAttempts: -1, ...credentialOptions(env("DWR_EXECUTOR_CREDS")) });
  const w = new Worker({ nc: enc, queue, leaseMs: 3000, executor: "ts-e2e", concurrency: 2 }, async (job: Job) => {
    const input = job.input as { n: number; approve?: unknown; read?: string };
    if (input.read !== undefined) return { output: { text: new TextDecoder().decode(await job.getArtifact(input.read)) } };
    if (input.approve !== undefined) {
      const d = await job.requestApproval({ action: input.approve, role: "ops", summary: "e2e" });
      return { output: { response: d.response, approver: d.approver } };
    }
    const n = input.n;
    return { output: { doubled: n * 2, deps: Object.keys(job.dependencies).sort(), attempt: job.attempt } };
  });
  const running = w.run();

  step("worker running");
  const c = await Client.connect(server, { creds: env("DWR_CREDS"), name: "ts-e2e-client" });
  const signal = AbortSignal.timeout(60000);

  // A goal and its plan, run by the worker; waited for on the feed.
  const g = await c.createGoal({
    title: "typescript round trip",
    labels: { sdk: "typescript" },
    tasks: [
      { key: "a", queue, input: { n: 1 } },
      { key: "b", queue, input: { n: 2 }, depends_on: ["a"] },
    ],
  });
  out.goal_id = g.id;
  out.plan_tasks = g.tasks;
  step("goal created");
  const done = await c.waitGoal(g.id, { signal });
  out.goal_state = done.state;
  const b = await c.task(g.tasks!.find((t) => t.key === "b")!.task_id);
  out.b_result = b.attempts?.at(-1)?.result;
  const listed: string[] = [];
  for await (const t of c.tasks({ goalId: g.id, limit: 1 })) listed.push(t.key ?? ""); // a page a task
  out.listed = listed.sort();
  const ofOtherQueue: string[] = [];
  for await (const t of c.tasks({ goalId: g.id, queue: "other" })) ofOtherQueue.push(t.key ?? "");
  out.listed_other_queue = ofOtherQueue;
  const newest: string[] = [];
  for await (const x of c.goals({ newestFirst: true, limit: 1 })) newest.push(x.id);
  out.newest_goal = newest[0];
  // Listed by its label, then relabeled once it has ended.
  const labeled: string[] = [];
  for await (const x of c.goals({ labels: { sdk: "typescript" } })) labeled.push(x.id);
  out.labeled = labeled;
  await c.labelGoal(g.id, { set: { stage: "done" }, remove: ["sdk"] });
  out.goal_labels = (await c.goal(g.id)).labels;
  out.relabel_duplicate = (await c.labelGoal(g.id, { remove: ["sdk"] })).duplicate ?? false;

  step("goal ended");
  // A goal's key names one open goal; its priority is set and changed; a
  // ritual's template renders a key; queues are an admin's to configure.
  const keyed = await c.createGoal({ title: "ts order", key: "ts-order-1", priority: 2 });
  try {
    await c.createGoal({ title: "ts order again", key: "ts-order-1" });
  } catch (e) {
    if (!(e instanceof DwrError)) throw e;
    out.key_refused = e.code;
  }
  out.key_used = (await c.createGoal({ title: "ts order again", key: "ts-order-1", if_open: "use" })).id === keyed.id;
  await c.prioritizeGoal(keyed.id, 1);
  const byKey = await c.goalByKey("ts-order-1");
  out.by_key = byKey.id === keyed.id ? byKey.priority : -1;
  await c.command("ritual.define", {
    name: "ts-onboard",
    parameters: { type: "object", properties: { who: { type: "string" } } },
    goal: { title: "Onboard ${who}", key: "ts-onboard-${who}" },
    tasks: [{ key: "a", queue: queue + "-idle" }],
  });
  const run = await c.runRitual("ts-onboard", { params: { who: "ada" } });
  out.ritual_key = (await c.goalByKey("ts-onboard-ada")).id === run.id;
  try {
    await c.configureQueue({ queue, order: "priority" });
  } catch (e) {
    if (!(e instanceof DwrError)) throw e;
    out.configure_refused = e.code;
  }
  // An artifact the client stores, which a job reads by its digest.
  const stored = await c.putArtifact("a few words, stored by the client", { name: "words.txt" });
  out.stored = stored.sha256;
  const reader = await c.createTask({ queue, title: "read", input: { read: stored.sha256 } });
  for (;;) {
    signal.throwIfAborted();
    const t = await c.task(reader.id);
    if (t.state === "accepted" || t.state === "failed") {
      out.read = t.attempts?.at(-1)?.result;
      break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  out.read_back = new TextDecoder().decode(await c.getArtifact(stored.sha256));

  // A task nobody serves: signalled (the signal is kept), then cancelled.
  const idle = await c.createTask({ queue: queue + "-idle", title: "idle", input: {} });
  out.idle_id = idle.id;
  await c.signal(idle.id, "poke", { x: 1 });
  const poked = await c.task(idle.id);
  out.idle_pending = (poked as { pending_signals?: unknown[] }).pending_signals?.length ?? 0;
  await c.cancelTask(idle.id, "no longer needed");
  out.idle_state = (await c.task(idle.id)).state;

  step("idle task cancelled");
  // One command id, sent twice: answered with the first outcome.
  const spec = { queue: queue + "-idle", title: "once", input: { once: true } };
  const first = await c.createTask(spec, { commandId: "ts-e2e-once" });
  const again = await c.createTask(spec, { commandId: "ts-e2e-once" });
  out.same_id = first.id === again.id;
  out.once_id = first.id;

  // A refusal is a DwrError naming the code and the field.
  try {
    await c.createTask({ queue: "Not A Queue", title: "bad" });
    out.refused = false;
  } catch (e) {
    if (!(e instanceof DwrError)) throw e;
    out.refused = { code: e.code, field: e.field, message: e.message };
  }
  // Another workspace's subjects are refused by the NATS server: forbidden at once, not retried.
  const t1 = Date.now();
  try {
    await new Client(c.nc, { workspace: "elsewhere" }).task("01ZZZZZZZZZZZZZZZZZZZZZZZZ");
    out.elsewhere = false;
  } catch (e) {
    if (!(e instanceof DwrError)) throw e;
    out.elsewhere = e.code;
    out.elsewhere_ms = Date.now() - t1;
  }
  try {
    await c.task("01ZZZZZZZZZZZZZZZZZZZZZZZZ");
    out.not_found = false;
  } catch (e) {
    if (!(e instanceof DwrError)) throw e;
    out.not_found = e.code;
  }

  step("refusals read");
  // An approval asked by the worker's job, decided by the approver with its key.
  const appr = await Client.connect(server, { creds: env("DWR_APPROVER_CREDS"), name: "ts-e2e-approver" });
  const asks = await c.createTask({ queue, title: "approve", input: { approve: { refund: 120, order: "o-7" } } });
  out.approval_task = asks.id;
  let approvalId = "";
  while (!approvalId) {
    signal.throwIfAborted();
    const t = await c.task(asks.id);
    approvalId = t.state === "waiting" ? (t.wait?.approval_id ?? "") : "";
    if (!approvalId) await new Promise((r) => setTimeout(r, 50));
  }
  try {
    await appr.decideApproval(approvalId, "approve", env("DWR_APPROVER_KEY"), { approver: "mallory" });
    out.forged = false;
  } catch (e) {
    if (!(e instanceof DwrError)) throw e;
    out.forged = e.code;
  }
  await appr.decideApproval(approvalId, "approve", env("DWR_APPROVER_KEY"), { comment: "fine" });
  for (;;) {
    signal.throwIfAborted();
    const t = await c.task(asks.id);
    if (t.state === "accepted") {
      out.approved = t.attempts?.at(-1)?.result;
      break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  await appr.close();
  step("approval decided");

  await w.stop();
  await running;
  await c.close();
  await enc.close();
  step("stopped");
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error("client_e2e:", e);
    process.exit(1);
  },
);
