// The agent example in TypeScript: a worker on queue "agent" that answers a
// refund ticket with one call to a (fake, local) model, records it as a
// model step whose raw response is an artifact, asks for approval of the
// exact refund, writes it to the outbox once (keyed by the operation key),
// and a verifier on queue "agent-checks" that checks the result.
//
//     DWR_CREDS=agent.creds node dist/agent.js
//
// Environment: DWR_SERVER (default nats://127.0.0.1:4222), DWR_CREDS,
// MODEL_URL (default http://127.0.0.1:8799/v1/chat/completions), OUTBOX
// (default outbox.jsonl).
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { Client, Permanent, Verifier, Worker, actionDigest, type ArtifactRef, type Check, type Job, type ModelStep, type Result, type Verdict } from "@dwr-run/dwr";

const modelURL = process.env.MODEL_URL ?? "http://127.0.0.1:8799/v1/chat/completions";
const outbox = process.env.OUTBOX ?? "outbox.jsonl";
const PromptVersion = "refund-agent-ts/1";
const MaxResponseBytes = 256 * 1024;

// The shop's orders (a database, in life).
const orders: Record<string, { id: string; total: number; currency: string }> = {
  "o-7": { id: "o-7", total: 120, currency: "EUR" },
};

type Ticket = { id: string; text: string };
type Refund = { type: "refund"; ticket: string; order_id: string; amount: number; currency: string };
type State = { refund: Refund; steps: ModelStep[]; artifacts: ArtifactRef[] };

/** One model call: the raw response, bounded. */
async function callModel(job: Job, ticket: Ticket, order: object): Promise<Uint8Array> {
  const res = await fetch(modelURL, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      model: "fake-gpt-1",
      temperature: 0,
      messages: [
        { role: "system", content: "You are a support agent. Answer with one JSON refund proposal, at most the order's total." },
        { role: "system", content: "Order record: " + JSON.stringify(order) },
        { role: "user", content: `Ticket ${ticket.id}: ${ticket.text}` },
      ],
    }),
    signal: AbortSignal.any([job.abort, AbortSignal.timeout(20_000)]),
  });
  const raw = new Uint8Array(await res.arrayBuffer());
  if (raw.length > MaxResponseBytes) throw new Permanent(`the model's response is over ${MaxResponseBytes} bytes`);
  if (res.status >= 400 && res.status < 500) throw new Permanent(`the model refused the request (${res.status})`);
  if (!res.ok) throw new Error(`the model answered ${res.status}`); // retried
  return raw;
}

/** The refund the model's raw response proposes, checked. */
function proposal(raw: Uint8Array): { order_id: string; amount: number; currency: string } {
  const content = JSON.parse(new TextDecoder().decode(raw))?.choices?.[0]?.message?.content;
  const p = typeof content === "string" ? JSON.parse(content) : undefined;
  if (p?.action !== "refund" || typeof p.order_id !== "string" || typeof p.amount !== "number" || typeof p.currency !== "string")
    throw new Permanent("the model's answer is not a refund proposal: /choices/0/message/content");
  return p;
}

/** The side effect, idempotent by the operation key: one outbox line per key. */
function applyRefund(operationKey: string, refund: Refund): boolean {
  const lines = existsSync(outbox) ? readFileSync(outbox, "utf8").split("\n").filter(Boolean) : [];
  if (lines.some((l) => JSON.parse(l).operation_key === operationKey)) return false;
  appendFileSync(outbox, JSON.stringify({ operation_key: operationKey, refund }) + "\n", { mode: 0o600 });
  return true;
}

async function handle(job: Job): Promise<Result> {
  const ticket = (job.input as { ticket?: Ticket })?.ticket;
  if (typeof ticket?.id !== "string" || typeof ticket.text !== "string") throw new Permanent("the input needs /ticket with an id and a text");
  let state = job.checkpoint as State | null | undefined;
  if (!state) {
    const order = orders[/\bo-\d+\b/.exec(ticket.text)?.[0] ?? ""];
    if (!order) throw new Permanent("the ticket names no order we know");
    const raw = await callModel(job, ticket, order);
    const ref = await job.putArtifact("model-response-1.json", raw);
    const p = proposal(raw);
    const tokens = JSON.parse(new TextDecoder().decode(raw))?.usage?.total_tokens ?? 0;
    state = {
      refund: { type: "refund", ticket: ticket.id, order_id: p.order_id, amount: p.amount, currency: p.currency },
      steps: [{ model: "fake-gpt-1", prompt_version: PromptVersion, tokens, response_ref: "sha256:" + ref.sha256, parsed: p }],
      artifacts: [ref],
    };
    await job.saveCheckpoint(state); // the next attempt starts here
  }
  const { refund } = state;
  // Parks the task until someone decides; the next attempt gets the decision on exactly this refund.
  const d = await job.requestApproval({
    action: refund,
    summary: `refund ${refund.amount} ${refund.currency} on ${refund.order_id} (ticket ${refund.ticket})`,
    role: "support-lead",
    expiresInMs: 24 * 3600_000,
    onExpiry: "reject",
  });
  if (d.response !== "approve") throw new Permanent(`refund ${d.response} by ${d.approver ?? "nobody"}`);
  const appliedNow = applyRefund(job.operationKey, refund);
  return {
    output: { ticket: ticket.id, refund, operation_key: job.operationKey, approved_by: d.approver, action_digest: d.actionDigest, applied_now: appliedNow },
    artifacts: state.artifacts,
    modelSteps: state.steps,
  };
}

async function verify(c: Check): Promise<Verdict> {
  const r = c.result as { refund?: Refund; approved_by?: string; action_digest?: string; operation_key?: string };
  const order = orders[r.refund?.order_id ?? ""];
  if (!r.refund || !order) return { outcome: "FAIL", evidence: { problems: ["no refund of a known order"] } };
  const response = c.artifacts.find((a) => a.name === "model-response-1.json");
  const raw = response && (await c.getArtifact(response.sha256)); // a failed read throws: the item comes again
  let proposed: { amount: number } | undefined;
  try {
    proposed = raw && proposal(raw);
  } catch {
    proposed = undefined; // a response that proposes no refund is a FAIL below
  }
  const lines = existsSync(outbox) ? readFileSync(outbox, "utf8").split("\n").filter((l) => l && JSON.parse(l).operation_key === r.operation_key) : [];
  const evidence = {
    order_total: order.total,
    refund: r.refund.amount,
    approved_by: r.approved_by,
    model_response: response && "sha256:" + response.sha256,
    outbox_lines: lines.length,
  };
  const problems = [
    !(r.refund.amount > 0 && r.refund.amount <= order.total) && "the refund is not within the order's total",
    r.refund.currency !== order.currency && "the refund's currency is not the order's",
    !r.approved_by && "nobody approved the refund",
    actionDigest(r.refund) !== r.action_digest && "the refund is not the action approved",
    proposed?.amount !== r.refund.amount && "the refund is not what the model proposed",
    lines.length !== 1 && "the outbox does not hold the refund once",
  ].filter(Boolean);
  return problems.length ? { outcome: "FAIL", evidence: { ...evidence, problems } } : { outcome: "PASS", evidence };
}

const client = await Client.connect(process.env.DWR_SERVER ?? "nats://127.0.0.1:4222", { creds: process.env.DWR_CREDS, name: "typescript-agent" });
const opts = { nc: client.nc, executor: "typescript-agent", version: PromptVersion, concurrency: 4, logger: console };
const worker = new Worker({ ...opts, queue: "agent" }, handle);
const verifier = new Verifier({ ...opts, queue: "agent-checks" }, verify);
for (const s of ["SIGTERM", "SIGINT"] as const) process.once(s, () => void Promise.all([worker.stop(), verifier.stop()]));
console.log(`agent: serving queues agent and agent-checks; model ${modelURL}; outbox ${outbox}`);
await Promise.all([worker.run(), verifier.run()]);
await client.close();
