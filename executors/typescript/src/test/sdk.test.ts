// Unit tests of the SDK's parts that need no server: what a handler's
// return or throw is reported as (through the testing harness, which uses
// the worker's own rules), approvals by digest, durations, credentials.
// `npm test` runs them; integration/ runs the SDK against a real service.
import assert from "node:assert/strict";
import { generateKeyPairSync, verify } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { createUser } from "@nats-io/nkeys";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  AbortReason,
  Client,
  DelegationFailed,
  DwrError,
  Cause,
  Failure,
  Permanent,
  actionDigest,
  attemptCount,
  canonicalJSON,
  canonicalAt,
  digestOf,
  parseDuration,
  readCredential,
  readSigningKey,
  signDecision,
  traceContextOf,
  Job,
  WaitError,
  type Approval,
  type Task,
} from "../index.js";
import { approvalRoleOf, decisionsOf } from "../delivery.js";
import { runJob } from "../testing.js";

test("a result is reported as the output, with its artifacts and model steps", async () => {
  const out = await runJob(
    async (job: Job) => {
      await job.saveCheckpoint({ step: 1 });
      const a = await job.putArtifact("report.txt", "hello");
      job.recordModelStep({ model: "m1", tokens: 3 });
      return { output: { n: (job.input as { n: number }).n + 1, key: job.operationKey }, artifacts: [a] };
    },
    { input: { n: 41 }, operationKey: "op-1" },
  );
  assert.equal(out.state, "succeeded");
  assert.deepEqual(out.output, { n: 42, key: "op-1" });
  assert.deepEqual(out.checkpoints, [{ step: 1 }]);
  assert.equal(out.artifacts?.[0]?.sha256, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  assert.deepEqual(out.modelSteps, [{ model: "m1", tokens: 3 }]);
});

test("an error is a retryable failure; Permanent and Failure say otherwise", async () => {
  const retry = await runJob(async () => {
    throw new Error("the API timed out");
  });
  assert.deepEqual(retry.failure, { message: "the API timed out", retryable: true });

  const perm = await runJob(async () => {
    throw new Permanent("no such order", { code: "not_found" });
  });
  assert.deepEqual(perm.failure, { code: "not_found", message: "no such order", retryable: false });

  const f = await runJob(async () => {
    throw new Failure("rate limited", { code: "rate_limited", retryable: true });
  });
  assert.deepEqual(f.failure, { code: "rate_limited", message: "rate limited", retryable: true });

  const odd = await runJob(async () => {
    throw "a string"; // eslint-disable-line no-throw-literal
  });
  assert.deepEqual(odd.failure, { message: "a string", retryable: true });
});

test("a failure keeps the model steps the job recorded", async () => {
  const out = await runJob(async (job: Job) => {
    job.recordModelStep({ model: "m1", tokens: 7 });
    throw new Error("the model's answer did not parse");
  });
  assert.equal(out.state, "failed");
  assert.deepEqual(out.modelSteps, [{ model: "m1", tokens: 7 }]);
});

test("an error after the deadline aborted the job is coded timeout", async () => {
  const ctl = new AbortController();
  ctl.abort(new AbortReason(Cause.Timeout, "dwr: the attempt passed its deadline"));
  const out = await runJob(
    async (job: Job) => {
      throw job.abort.reason;
    },
    { abort: ctl.signal },
  );
  assert.equal(out.failure?.code, "timeout");
  assert.equal(out.failure?.retryable, true);
});

test("an output too large or that does not encode is a failure not retried", async () => {
  const big = await runJob(async () => ({ output: "x".repeat(256 << 10) }));
  assert.equal(big.failure?.code, "invalid_result");
  assert.equal(big.failure?.retryable, false);
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  const bad = await runJob(async () => ({ output: cyclic }));
  assert.equal(bad.failure?.code, "invalid_result");
});

test("a checkpoint larger than 256 KiB is refused before it is sent", async () => {
  const out = await runJob(async (job: Job) => {
    await job.saveCheckpoint({ blob: "x".repeat(256 << 10) });
    return {};
  });
  assert.equal(out.state, "failed");
  assert.match(out.failure!.message, /at most 262144 are allowed/);
  assert.deepEqual(out.checkpoints, []);
});

test("sleep and awaitSignal park the task", async () => {
  const until = new Date("2030-01-01T00:00:00Z");
  const slept = await runJob((job: Job) => job.sleep(until));
  assert.equal(slept.state, "waiting");
  assert.equal(slept.wait?.until?.toISOString(), until.toISOString());

  const waited = await runJob(async (job: Job) => {
    if (!job.signal) return job.awaitSignal("go-ahead");
    return { output: job.signal.payload };
  });
  assert.equal(waited.wait?.signalName, "go-ahead");
  const resumed = await runJob(
    async (job: Job) => {
      if (!job.signal) return job.awaitSignal("go-ahead");
      return { output: job.signal.payload };
    },
    { signal: { name: "go-ahead", payload: { by: "ops" } } },
  );
  assert.deepEqual(resumed.output, { by: "ops" });
});

test("a dropped sleep does not end the process with an unhandled rejection", async () => {
  const out = await runJob(async (job: Job) => {
    void job.sleep(new Date()); // forgotten: not returned
    return { output: 1 };
  });
  assert.equal(out.state, "succeeded");
});

test("an approval is asked once, and the decision on that exact action is handed back", async () => {
  const handler = async (job: Job) => {
    const d = await job.requestApproval({ action: { refund: 120, order: "o-7" }, role: "ops", summary: "refund" });
    return { output: { response: d.response, digest: d.actionDigest } };
  };
  const asked = await runJob(handler);
  assert.equal(asked.state, "waiting");
  assert.equal(asked.wait?.approvalId, "01J00000000000000000000000-1");
  const digest = actionDigest({ order: "o-7", refund: 120 }); // key order does not matter
  assert.equal(asked.wait?.actionDigest, digest);
  assert.deepEqual(asked.approvals[0]?.action, { order: "o-7", refund: 120 });

  const other = {
    approvalId: "x-1",
    actionDigest: actionDigest({ refund: 999, order: "o-7" }),
    response: "approve",
    approver: "eve",
    role: "ops",
    decidedAt: "2026-01-01T00:00:00Z",
  };
  const still = await runJob(handler, { decisions: [other] });
  assert.equal(still.state, "waiting", "a decision on another action authorizes nothing");

  const mine = { ...other, actionDigest: digest, approver: "ada" };
  const done = await runJob(handler, { decisions: [other, mine] });
  assert.deepEqual(done.output, { response: "approve", digest });
});

test("a decision asked of one role does not stand for another's on the same action", async () => {
  const payment = { pay: { to: "ACME", cents: 990_000 } };
  const digest = actionDigest(payment);
  const handler = async (job: Job) => {
    const by: string[] = [];
    for (const role of ["finance", "legal"]) {
      const d = await job.requestApproval({ action: payment, role });
      by.push(`${d.approver} for ${d.askedRole}`);
    }
    return { output: by };
  };
  const finance = {
    approvalId: "01J00000000000000000000000-1",
    actionDigest: digest,
    response: "approve",
    approver: "ada",
    role: "finance",
    decidedAt: "2026-01-01T00:00:00Z",
  };
  const asked = await runJob(handler, { attempt: 2, decisions: [finance] });
  assert.equal(asked.state, "waiting", "finance's decision was taken for legal's");
  assert.equal(asked.wait?.actionDigest, digest);
  assert.equal(asked.approvals.length, 1);
  assert.equal(asked.approvals[0]?.role, "legal");

  // Nor does it stand for a request that names no role (of a job without the task's approval settings).
  const anyone = await runJob(
    async (job: Job) => {
      await job.requestApproval({ action: payment });
    },
    { decisions: [finance] },
  );
  assert.equal(anyone.state, "waiting");

  const legal = { ...finance, approvalId: "01J00000000000000000000000-2", approver: "lee", role: "legal" };
  const done = await runJob(handler, { attempt: 3, decisions: [finance, legal] });
  assert.deepEqual(done.output, ["ada for finance", "lee for legal"]);
  assert.equal(done.approvals.length, 0, "nothing was asked again once both roles decided");
});

/** approvalJob builds a job from task t as a worker does, recording the approvals it asks for in asked. */
function approvalJob(t: Task, asked: Record<string, unknown>[]): Job {
  return new Job(
    {
      taskId: t.id,
      workspace: t.workspace,
      queue: t.spec.queue,
      attempt: 3,
      operationKey: "op-" + t.id,
      input: t.spec.input,
      checkpoint: undefined,
      priorAttempts: [],
      verifications: [],
      decisions: decisionsOf(t),
      approvalRole: approvalRoleOf(t),
      dependencies: {},
      abort: new AbortController().signal,
    },
    {
      saveCheckpoint: async () => undefined,
      putArtifact: async () => ({ name: "", sha256: "", size: 0 }),
      getArtifact: async () => new Uint8Array(),
      requestApproval: async (body) => {
        asked.push(body);
        return `${t.id}-${asked.length + (t.approvals?.length ?? 0)}`;
      },
      delegate: async () => "",
    },
  );
}

test("an approval an escalation made counts for the role the escalated request asked", async () => {
  const payment = { pay: { to: "ACME", cents: 990_000 } };
  const digest = actionDigest(payment);
  const approval = (n: number, role: string, more: Partial<Approval>): Approval => ({
    id: `T-${n}`,
    task_id: "T",
    attempt: 2,
    action: payment,
    action_digest: digest,
    role,
    state: "decided",
    ...more,
  });
  const decision = (response: string, branch: string, approver: string, role: string) => ({
    response,
    branch,
    approver,
    role,
    decided_at: "2026-01-01T00:00:00Z",
  });
  const task: Task = {
    id: "T",
    workspace: "default",
    spec: { queue: "payments" },
    state: "running",
    approvals: [
      approval(1, "finance", {
        escalate_to: "counsel",
        asked_role: "finance",
        decision: decision("escalate", "escalate", "fay", "finance"),
      }),
      approval(2, "counsel", {
        escalated_from: "T-1",
        asked_role: "finance",
        decision: decision("approve", "resume", "gc", "counsel"),
      }),
    ],
  };
  const ds = decisionsOf(task);
  assert.deepEqual(
    ds.map((d) => [d.approvalId, d.response, d.approver, d.askedRole]),
    [
      ["T-1", "escalate", "fay", "finance"],
      ["T-2", "approve", "gc", "finance"],
    ],
  );
  const asked: Record<string, unknown>[] = [];
  const d = await approvalJob(task, asked).requestApproval({ action: payment, role: "finance" });
  assert.equal(d.approvalId, "T-2");
  assert.equal(d.approver, "gc");
  assert.ok(d.response === "approve" && d.role === "counsel" && d.askedRole === "finance");
  await assert.rejects(approvalJob(task, asked).requestApproval({ action: payment, role: "counsel" }), WaitError);
  assert.equal(asked.length, 1, "the escalation's approval is not counsel's own");

  // An approval no escalation made asked its own role, whatever asked_role says; so does an escalation's
  // recorded by a service that did not record escalated_from: finance's decision is then its own, the
  // escalation — not an approval.
  const old: Task = {
    ...task,
    approvals: [task.approvals![0], { ...task.approvals![1], escalated_from: undefined }],
  };
  assert.deepEqual(
    decisionsOf(old).map((d) => d.askedRole),
    ["finance", "counsel"],
  );
  const escalation = await approvalJob(old, asked).requestApproval({ action: payment, role: "finance" });
  assert.ok(escalation.approvalId === "T-1" && escalation.response === "escalate");
  assert.equal(asked.length, 1, "nothing more asked");
});

test("a quorum's decision names every approver, and a request asks its quorum", async () => {
  const action = { pay: { to: "ACME", cents: 1_250_000 } };
  const signed = { response: "approve", branch: "resume", approver: "ada", role: "finance", decided_at: "2026-01-01T00:00:00Z" };
  const approval: Approval = {
    id: "T-1",
    task_id: "T",
    attempt: 1,
    action,
    action_digest: actionDigest(action),
    role: "finance",
    state: "decided",
    quorum: 2,
    sign_offs: [signed as never],
    decision: { ...signed, approver: "bo" } as never,
  };
  const task: Task = { id: "T", workspace: "default", spec: { queue: "payments" }, state: "running", approvals: [approval] };
  assert.deepEqual(decisionsOf(task)[0]!.approvers, ["ada", "bo"]);
  const rejected = { ...approval, decision: { ...signed, approver: "bo", response: "reject" } as never };
  assert.equal(decisionsOf({ ...task, approvals: [rejected] })[0]!.approvers, undefined, "a rejection is one approver's");
  const asked: Record<string, unknown>[] = [];
  await assert.rejects(
    approvalJob({ ...task, approvals: [] }, asked).requestApproval({ action, role: "finance", quorum: 2 }),
    WaitError,
  );
  assert.equal(asked[0]!.quorum, 2);
  assert.equal(asked[0]!.exclude_requester, undefined, "not asked: not sent");
  await assert.rejects(
    approvalJob({ ...task, approvals: [] }, asked).requestApproval({ action, role: "finance", excludeRequester: true }),
    WaitError,
  );
  assert.equal(asked[1]!.exclude_requester, true);
});

test("a request that names no role is asked of the role of the task's approval settings", async () => {
  const action = { refund: 120, order: "o-7" };
  const digest = actionDigest(action);
  const task: Task = {
    id: "T",
    workspace: "default",
    spec: { queue: "refunds", approval: { role: "finance" } },
    state: "running",
    approvals: [
      {
        id: "T-1",
        task_id: "T",
        attempt: 1,
        action,
        action_digest: digest,
        role: "finance",
        state: "decided",
        decision: { response: "approve", branch: "resume", approver: "ada", role: "finance", decided_at: "2026-01-01T00:00:00Z" },
      },
    ],
  };
  const asked: Record<string, unknown>[] = [];
  const d = await approvalJob(task, asked).requestApproval({ action });
  assert.equal(d.approvalId, "T-1");
  assert.equal(d.askedRole, "finance");
  await assert.rejects(approvalJob(task, asked).requestApproval({ action, role: "legal" }), WaitError);
  assert.equal(asked.length, 1);

  // Without approval settings, a request that names no role is asked of any approver: finance's decision is not it.
  const plain: Task = { ...task, spec: { queue: "refunds" } };
  await assert.rejects(approvalJob(plain, asked).requestApproval({ action }), WaitError);
  assert.equal(asked.length, 2);
  assert.equal(asked[1]?.role, undefined, "the service gives the request its role");
});

test("a task's attempts are its listed ones and those it tallies", () => {
  const t = { id: "t", workspace: "w", spec: { queue: "q" }, state: "ready", attempts: [{ n: 151 }, { n: 152 }] };
  assert.equal(attemptCount(t as never), 2);
  assert.equal(attemptCount({ ...t, earlier_attempts: { count: 150 } } as never), 152);
});

test("canonical JSON sorts keys by their UTF-8 bytes and keeps numbers as written", () => {
  assert.equal(canonicalJSON('{"b": 1.50, "a": [1e3, -0.0], "é": 1, "z": 2}'), '{"a":[1e3,-0.0],"b":1.50,"z":2,"é":1}');
  assert.equal(canonicalJSON('"a\u2028b<&>"'), '"a\\u2028b<&>"');
  assert.throws(() => canonicalJSON('{"a": 1} {"b": 2}'), /more than one JSON value/);
  assert.throws(() => canonicalJSON("[".repeat(40) + "]".repeat(40)), /deeper than 32/);
  assert.throws(() => canonicalJSON("{'a': 1}"), /not JSON/);
});

test("canonicalAt is the canonical JSON of a member, its numbers as written", () => {
  const reply = '{"ok": true, "result": {"id": "T-1", "action": {"b": 1e21, "a": [1.50]}}}';
  assert.equal(canonicalAt(reply, ["result", "action"]), '{"a":[1.50],"b":1e21}');
  assert.throws(() => canonicalAt(reply, ["result", "basis"]), /no result.basis/);
  assert.throws(() => canonicalAt('{"result": [1]}', ["result", "action"]), /no result.action/);
  const deep = "[".repeat(32) + "]".repeat(32);
  assert.equal(canonicalAt(`{"result": {"action": ${deep}}}`, ["result", "action"]), deep, "32 levels below the path");
});

test("decideApproval signs the digest of the action as the service wrote it", async () => {
  // 1e21 and 1.50 as written: decoded to numbers and written again, they are 1e+21 and 1.5.
  const action = '{"wire": {"amount": 1e21, "rate": 1.50}}';
  const digest = digestOf(canonicalJSON(action));
  assert.notEqual(digest, actionDigest(JSON.parse(action)));
  const sent: { subject: string; body: Record<string, string> }[] = [];
  const nc = {
    isClosed: () => false,
    request: async (subject: string, data: Uint8Array) => {
      sent.push({ subject, body: JSON.parse(new TextDecoder().decode(data)) });
      const result = subject.endsWith(".approval.get")
        ? `{"id": "T-1", "action": ${action}, "action_digest": "${digest}"}`
        : '{"id": "T"}';
      return { data: new TextEncoder().encode(`{"ok": true, "result": ${result}}`) };
    },
  };
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  await new Client(nc as never).decideApproval("T-1", "approve", { key: privateKey, approver: "ada", workspace: "" });
  assert.deepEqual(
    sent.map((m) => m.subject),
    ["dwr.q.default.approval.get", "dwr.cmd.default.approval.decide"],
  );
  const decision = sent[1]!.body;
  assert.equal(decision.action_digest, digest);
  assert.ok(
    verify(
      null,
      Buffer.from(`dwr approval decision v1\nT-1\napprove\n${digest}`),
      publicKey,
      Buffer.from(decision.signature!, "base64"),
    ),
  );
});

test("durations read as the service writes them", () => {
  assert.equal(parseDuration("1m30s"), 90000);
  assert.equal(parseDuration("1.5s"), 1500);
  assert.equal(parseDuration("250ms"), 250);
  assert.equal(parseDuration("1h0m0s"), 3600000);
  assert.equal(parseDuration(2), 2000);
  assert.equal(parseDuration(undefined), 0);
  assert.throws(() => parseDuration("soon"), /not a duration/);
});

test("a credential file yields its seed and public key; anything else is refused", () => {
  const dir = mkdtempSync(join(tmpdir(), "dwr-creds-"));
  const kp = createUser();
  const seed = new TextDecoder().decode(kp.getSeed());
  const file = join(dir, "pay-1.creds");
  writeFileSync(file, `# dwr credential: executor pay-1\n# identity ${kp.getPublicKey()}\n${seed}\n`);
  const c = readCredential(file);
  assert.equal(c.publicKey, kp.getPublicKey());
  assert.equal(new TextDecoder().decode(c.seed), seed);

  const empty = join(dir, "empty.creds");
  writeFileSync(empty, "# nothing here\n");
  assert.throws(() => readCredential(empty), /holds no user nkey seed/);
  const huge = join(dir, "huge.creds");
  writeFileSync(huge, "#".repeat(70 << 10));
  assert.throws(() => readCredential(huge), /larger than 65536 bytes/);
});

test("a key file yields the approver's Ed25519 key; another kind of key is refused", () => {
  const dir = mkdtempSync(join(tmpdir(), "dwr-key-"));
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const file = join(dir, "ada.key");
  writeFileSync(file, `# approver: ada\n# workspace: default\n${privateKey.export({ type: "pkcs8", format: "pem" })}`);
  const k = readSigningKey(file);
  assert.equal(k.approver, "ada");
  assert.equal(k.workspace, "default");
  const sig = signDecision(k.key, "T-1", "approve", "sha256:ab");
  assert.ok(
    verify(null, Buffer.from("dwr approval decision v1\nT-1\napprove\nsha256:ab"), publicKey, Buffer.from(sig, "base64")),
  );

  const rsa = join(dir, "rsa.key");
  writeFileSync(rsa, generateKeyPairSync("rsa", { modulusLength: 1024 }).privateKey.export({ type: "pkcs8", format: "pem" }));
  assert.throws(() => readSigningKey(rsa), /not an Ed25519 key/);
  const none = join(dir, "none.key");
  writeFileSync(none, "# approver: ada\n");
  assert.throws(() => readSigningKey(none), /holds no PEM "PRIVATE KEY" block/);
});

test("a job reads artifacts by digest: those it stored, and those the test gives", async () => {
  const given = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"; // sha256("hello")
  const out = await runJob(
    async (job: Job) => {
      const a = await job.putArtifact("mine.txt", "mine");
      const mine = new TextDecoder().decode(await job.getArtifact(a.sha256));
      const theirs = new TextDecoder().decode(await job.getArtifact(given));
      return { output: { mine, theirs } };
    },
    { artifacts: { [given]: "hello" } },
  );
  assert.deepEqual(out.output, { mine: "mine", theirs: "hello" });
});

test("a traceparent is taken only when it is a valid W3C one, with its tracestate", () => {
  const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  assert.deepEqual(traceContextOf(tp), { traceparent: tp });
  assert.deepEqual(traceContextOf(` ${tp} `, "congo=t61rcWkgMzE"), { traceparent: tp, tracestate: "congo=t61rcWkgMzE" });
  assert.deepEqual(traceContextOf(tp, "bad\nstate"), { traceparent: tp }, "a tracestate a header cannot carry is dropped");
  assert.deepEqual(traceContextOf(tp, "x".repeat(513)), { traceparent: tp });
  for (const bad of [
    "",
    undefined,
    null,
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // no trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // no parent id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more", // version 00 has no more fields
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
    "not a traceparent",
  ]) {
    assert.equal(traceContextOf(bad), undefined, String(bad));
  }
  assert.deepEqual(traceContextOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more"), {
    traceparent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more",
  });
});

/** A connection that records what is requested (subject and body) and answers each with the next of replies. */
function recordingConnection(...replies: string[]) {
  const sent: { subject: string; body: Record<string, unknown> }[] = [];
  const nc = {
    isClosed: () => false,
    request: async (subject: string, data: Uint8Array) => {
      sent.push({ subject, body: JSON.parse(new TextDecoder().decode(data)) });
      return { data: new TextEncoder().encode(replies.shift() ?? '{"ok": true, "result": {"id": "G-1", "version": 1}}') };
    },
  };
  return { client: new Client(nc as never), sent };
}

test("goal labels: createGoal sends them, labelGoal sets and removes, goals selects by them", async () => {
  const { client, sent } = recordingConnection(
    '{"ok": true, "result": {"id": "G-1", "version": 1}}',
    '{"ok": true, "result": {"id": "G-1", "version": 1, "duplicate": true}}',
    '{"ok": true, "result": [{"id": "G-1"}], "next": "G-1"}',
    '{"ok": true, "result": [{"id": "G-2", "labels": {"customer": "acme"}}]}',
  );
  await client.createGoal({ title: "onboard ACME", labels: { customer: "acme", ticket: "" } });
  const r = await client.labelGoal("G-1", { set: { stage: "review" }, remove: ["owner"] });
  assert.equal(r.duplicate, true);
  const ids: string[] = [];
  for await (const g of client.goals({ labels: { customer: "acme" }, state: "open" })) ids.push(g.id);
  assert.deepEqual(ids, ["G-1", "G-2"]);
  await client.labelGoal("G-1", { remove: ["stage"] });
  assert.deepEqual(sent, [
    { subject: "dwr.cmd.default.goal.create", body: { title: "onboard ACME", labels: { customer: "acme", ticket: "" } } },
    { subject: "dwr.cmd.default.goal.label", body: { goal_id: "G-1", set: { stage: "review" }, remove: ["owner"] } },
    { subject: "dwr.q.default.goal.list", body: { state: "open", labels: { customer: "acme" } } },
    { subject: "dwr.q.default.goal.list", body: { state: "open", labels: { customer: "acme" }, after: "G-1" } },
    { subject: "dwr.cmd.default.goal.label", body: { goal_id: "G-1", remove: ["stage"] } },
  ]);
  await assert.rejects(client.labelGoal("G-1", { set: {}, remove: [] }), /give labels to set or names to remove/);
  assert.equal(sent.length, 5, "a change of nothing is not sent");
});

test("goal priority: createGoal sends it, prioritizeGoal changes it", async () => {
  const { client, sent } = recordingConnection(
    '{"ok": true, "result": {"id": "G-1", "version": 1}}',
    '{"ok": true, "result": {"id": "G-1", "version": 2}}',
    '{"ok": true, "result": {"id": "G-1", "version": 2, "duplicate": true}}',
    '{"ok": true, "result": {"id": "G-2", "version": 1}}',
  );
  await client.createGoal({ title: "urgent", priority: 1, labels: { customer: "acme" } });
  const r1 = await client.prioritizeGoal("G-1", 5);
  assert.notEqual(r1.duplicate, true);
  const r2 = await client.prioritizeGoal("G-1", 5, { commandId: "prio-1" });
  assert.equal(r2.duplicate, true);
  await client.createGoal({ title: "no priority" });
  assert.deepEqual(sent, [
    { subject: "dwr.cmd.default.goal.create", body: { title: "urgent", priority: 1, labels: { customer: "acme" } } },
    { subject: "dwr.cmd.default.goal.prioritize", body: { goal_id: "G-1", priority: 5 } },
    { subject: "dwr.cmd.default.goal.prioritize", body: { goal_id: "G-1", priority: 5 } },
    { subject: "dwr.cmd.default.goal.create", body: { title: "no priority" } },
  ]);
});

test("goal keys: createGoal sends key and if_open, goalByKey reads goal.get by key", async () => {
  const { client, sent } = recordingConnection(
    '{"ok": true, "result": {"id": "G-1", "version": 1}}',
    '{"ok": true, "result": {"id": "G-1", "version": 1, "duplicate": true}}',
    '{"ok": true, "result": {"id": "G-1", "title": "order 1042", "key": "order-1042", "state": "open"}}',
    '{"ok": false, "error": {"code": "not_found", "message": "no goal was made with key \\"nope\\""}}',
  );
  await client.createGoal({ title: "order 1042", key: "order-1042" });
  const r = await client.createGoal({ title: "order 1042", key: "order-1042", if_open: "use" });
  assert.equal(r.duplicate, true);
  assert.equal(r.id, "G-1");
  const g = await client.goalByKey("order-1042");
  assert.equal(g.id, "G-1");
  assert.equal(g.key, "order-1042");
  await assert.rejects(client.goalByKey("nope"), (e: unknown) => e instanceof DwrError && e.code === "not_found");
  assert.deepEqual(sent, [
    { subject: "dwr.cmd.default.goal.create", body: { title: "order 1042", key: "order-1042" } },
    { subject: "dwr.cmd.default.goal.create", body: { title: "order 1042", key: "order-1042", if_open: "use" } },
    { subject: "dwr.q.default.goal.get", body: { key: "order-1042" } },
    { subject: "dwr.q.default.goal.get", body: { key: "nope" } },
  ]);
});

test("task labels: createTask sends them, labelTask sets and removes, tasks selects by them", async () => {
  const { client, sent } = recordingConnection(
    '{"ok": true, "result": {"id": "T-1", "version": 1}}',
    '{"ok": true, "result": {"id": "T-1", "version": 2}}',
    '{"ok": true, "result": [{"id": "T-1"}]}',
  );
  await client.createTask({ queue: "mail" }, { labels: { customer: "acme" } });
  await client.labelTask("T-1", { set: { stage: "sent" }, remove: ["customer"] });
  const ids: string[] = [];
  for await (const t of client.tasks({ labels: { stage: "sent" }, queue: "mail" })) ids.push(t.id);
  assert.deepEqual(ids, ["T-1"]);
  assert.deepEqual(sent, [
    { subject: "dwr.cmd.default.task.create", body: { spec: { queue: "mail" }, labels: { customer: "acme" } } },
    { subject: "dwr.cmd.default.task.label", body: { task_id: "T-1", set: { stage: "sent" }, remove: ["customer"] } },
    { subject: "dwr.q.default.task.list", body: { queue: "mail", labels: { stage: "sent" } } },
  ]);
  await assert.rejects(client.labelTask("T-1", {}), /labelTask: give labels to set or names to remove/);
});

test("queue administration: configureQueue sends what is given with its defaults, pause, resume, delete, queues", async () => {
  const { client, sent } = recordingConnection(
    '{"ok": true, "result": {"id": "llm", "version": 2, "queue": "llm", "lease_ms": 60000, "max_deliver": 3, "max_running": 4, "rate_limit": 60, "rate_period_ms": 60000, "order": "priority"}}',
    '{"ok": true, "result": {"id": "mail", "version": 1, "queue": "mail", "lease_ms": 30000, "max_deliver": 5}}',
    '{"ok": true, "result": {"id": "llm", "version": 3, "queue": "llm", "lease_ms": 30000, "max_deliver": 5}}',
    '{"ok": true, "result": {"id": "mail", "version": 2, "queue": "mail", "lease_ms": 30000, "max_deliver": 5, "paused": true}}',
    '{"ok": true, "result": {"id": "mail", "version": 3, "queue": "mail", "lease_ms": 30000, "max_deliver": 5}}',
    '{"ok": true, "result": {"id": "mail", "version": 4}}',
    '{"ok": true, "result": [{"name": "llm", "lease_ms": 30000, "max_deliver": 5, "pending": 2, "in_flight": 1, "waiting_pulls": 0}], "next": "llm"}',
    '{"ok": true, "result": [{"name": "mail", "lease_ms": 30000, "max_deliver": 5, "paused": true, "pending": 0, "in_flight": 0, "waiting_pulls": 1}]}',
  );
  const r = await client.configureQueue(
    { queue: "llm", lease_ms: 60000, max_deliver: 3, max_running: 4, rate_limit: 60, rate_period_ms: 60000, order: "priority" },
    { commandId: "cfg-1" },
  );
  assert.deepEqual(
    [r.queue, r.lease_ms, r.max_deliver, r.max_running, r.rate_limit, r.rate_period_ms, r.order],
    ["llm", 60000, 3, 4, 60, 60000, "priority"],
    "the settings in effect",
  );
  await client.configureQueue({ queue: "mail" });
  await client.configureQueue({ queue: "llm", max_running: -1, rate_limit: -1, order: "fifo", if_unset: true });
  assert.equal((await client.pauseQueue("mail")).paused, true);
  assert.notEqual((await client.resumeQueue("mail")).paused, true);
  await client.deleteQueue("mail");
  const queues: [string, number, boolean][] = [];
  for await (const q of client.queues()) queues.push([q.name, q.pending, q.paused ?? false]);
  assert.deepEqual(queues, [
    ["llm", 2, false],
    ["mail", 0, true],
  ]);
  assert.deepEqual(sent, [
    {
      subject: "dwr.cmd.default.queue.configure",
      body: {
        queue: "llm",
        lease_ms: 60000,
        max_deliver: 3,
        max_running: 4,
        rate_limit: 60,
        rate_period_ms: 60000,
        order: "priority",
      },
    },
    { subject: "dwr.cmd.default.queue.configure", body: { queue: "mail", lease_ms: 30000, max_deliver: 5 } },
    {
      subject: "dwr.cmd.default.queue.configure",
      body: { queue: "llm", lease_ms: 30000, max_deliver: 5, max_running: -1, rate_limit: -1, order: "fifo", if_unset: true },
    },
    { subject: "dwr.cmd.default.queue.pause", body: { queue: "mail" } },
    { subject: "dwr.cmd.default.queue.resume", body: { queue: "mail" } },
    { subject: "dwr.cmd.default.queue.delete", body: { queue: "mail" } },
    { subject: "dwr.q.default.queue.list", body: {} },
    { subject: "dwr.q.default.queue.list", body: { after: "llm" } },
  ]);
});

test("rituals: runRitual sends ritual.run with what is given, and answers as createGoal", async () => {
  const { client, sent } = recordingConnection(
    '{"ok": true, "result": {"id": "G-1", "version": 1, "tasks": [{"key": "draft", "task_id": "T-1"}]}}',
    '{"ok": true, "result": {"id": "G-1", "version": 1, "duplicate": true}}',
    '{"ok": true, "result": {"id": "G-2", "version": 1}}',
  );
  const r = await client.runRitual(
    "release",
    { params: { version: "1.2", dry_run: false }, version: 3, labels: { team: "core" }, key: "release-1.2" },
    { commandId: "run-1" },
  );
  assert.equal(r.id, "G-1");
  assert.deepEqual(r.tasks, [{ key: "draft", task_id: "T-1" }]);
  const again = await client.runRitual("release", { params: { version: "1.2" }, key: "release-1.2", if_open: "use" });
  assert.equal(again.duplicate, true);
  await client.runRitual("release");
  await client.runRitual("release", { params: {}, labels: {} });
  assert.deepEqual(sent, [
    {
      subject: "dwr.cmd.default.ritual.run",
      body: {
        name: "release",
        version: 3,
        params: { version: "1.2", dry_run: false },
        labels: { team: "core" },
        key: "release-1.2",
      },
    },
    {
      subject: "dwr.cmd.default.ritual.run",
      body: { name: "release", params: { version: "1.2" }, key: "release-1.2", if_open: "use" },
    },
    { subject: "dwr.cmd.default.ritual.run", body: { name: "release" } },
    { subject: "dwr.cmd.default.ritual.run", body: { name: "release", params: {} } },
  ]);
});

test("a client sends its option's traceparent, else TRACEPARENT's", () => {
  const nc = {} as NatsConnection; // never used: no request is sent
  const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const fromEnv = "00-11111111111111111111111111111111-1111111111111111-01";
  const saved = process.env.TRACEPARENT;
  try {
    delete process.env.TRACEPARENT;
    assert.equal(new Client(nc).traceparent, undefined);
    process.env.TRACEPARENT = fromEnv;
    assert.equal(new Client(nc).traceparent, fromEnv);
    assert.equal(new Client(nc, { traceparent: tp }).traceparent, tp);
    assert.equal(new Client(nc, { traceparent: "" }).traceparent, undefined, "an empty option sends none");
    process.env.TRACEPARENT = "garbage";
    assert.equal(new Client(nc).traceparent, undefined);
  } finally {
    if (saved === undefined) delete process.env.TRACEPARENT;
    else process.env.TRACEPARENT = saved;
  }
});

test("a delegation parks the job, and the resumed attempt gets the child goal's results", async () => {
  const handler = async (job: Job) => {
    const d = await job.delegate({
      key: "sources",
      title: "gather",
      tasks: [{ key: "s1", queue: "research" }],
      labels: { customer: "acme" },
    });
    return { output: d.results.s1?.result };
  };
  const first = await runJob(handler);
  assert.equal(first.state, "waiting");
  assert.equal(first.wait?.goalId, "goal-1");
  assert.equal(first.wait?.delegationKey, "sources");
  assert.deepEqual(first.delegations, [
    {
      key: "sources",
      on_failure: undefined,
      goal: {
        title: "gather",
        description: undefined,
        success_criteria: undefined,
        envelope: undefined,
        labels: { customer: "acme" },
        tasks: [{ key: "s1", queue: "research" }],
      },
    },
  ]);
  const results = { s1: { key: "s1", task_id: "t-1", result: { found: 3 } } };
  const resumed = await runJob(handler, {
    attempt: 2,
    delegations: [{ key: "sources", goalId: "goal-1", state: "achieved", results }],
  });
  assert.equal(resumed.state, "succeeded");
  assert.deepEqual(resumed.output, { found: 3 });
  assert.deepEqual(resumed.delegations, [], "nothing delegated again");

  const failed = await runJob(
    async (job: Job) => {
      try {
        await job.delegate({ key: "sources", title: "gather" });
      } catch (e) {
        if (e instanceof DelegationFailed) return { output: { fallback: e.delegated.state } };
        throw e;
      }
    },
    { delegations: [{ key: "sources", goalId: "goal-1", state: "failed", reason: "no luck", results: {} }] },
  );
  assert.deepEqual(failed.output, { fallback: "failed" });

  const bad = await runJob((job: Job) => job.delegate({ key: "no spaces", title: "x" }).then(() => undefined));
  assert.equal(bad.state, "failed");
  assert.match(bad.failure!.message, /key "no spaces" is not valid/);
  const both = await runJob((job: Job) => job.delegate({ key: "k", title: "x", ritual: { name: "r" } }).then(() => undefined));
  assert.match(both.failure!.message, /not both/);
});
