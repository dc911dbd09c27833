// Unit tests of a worker's queue keys (queue_keys.ts) on the work item the
// Go code sealed (schemas/seal/testdata/sealed.json): the day's key read
// once, one read at a time; a refusal remembered; an answer for another
// queue or day, or an item with a goal's own key, not used. The queue.key
// query is answered here as the service answers it; the Go-driven
// TestTypeScriptWorkersOpenTheirQueuesSealedItemsThemselves runs it
// against a real one.
import assert from "node:assert/strict";
import { test } from "node:test";
import { golden } from "./golden.js";
import { QueueKeys } from "../queue_keys.js";
import type { Service } from "../service.js";
import type { Config } from "../worker.js";
import type { Reply } from "../wire.js";

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const cfg = { workspace: golden.workspace, queue: golden.queue, prefix: "dwr", log: quiet } as unknown as Config;

/** keyService answers queue.key with reply(body) after a turn, counting the requests. */
function keyService(reply: (body: { queue: string; epoch: number }) => Reply) {
  const sent: { subject: string; body: { queue: string; epoch: number } }[] = [];
  const svc = {
    async request(subject: string, data: Uint8Array) {
      const body = JSON.parse(new TextDecoder().decode(data));
      sent.push({ subject, body });
      await new Promise((r) => setImmediate(r));
      return reply(body);
    },
  } as unknown as Service;
  return { svc, sent };
}

const handed = (b: { queue: string; epoch: number }): Reply => ({
  ok: true,
  result: { queue: b.queue, epoch: b.epoch, key: golden.queue_key },
});
const signal = new AbortController().signal;

test("a sealed item opens with the day's key, read once for items opened at once", async () => {
  const { svc, sent } = keyService(handed);
  const qk = new QueueKeys(cfg);
  const items = await Promise.all([1, 2, 3].map(() => qk.openItem(golden.item, "execute", svc, signal)));
  for (const it of items) assert.deepEqual(it, JSON.parse(golden.plain_item));
  assert.deepEqual(sent, [
    { subject: `dwr.q.${golden.workspace}.queue.key`, body: { queue: golden.queue, epoch: golden.epoch } },
  ]);
  assert.deepEqual(await qk.openItem(golden.item, "execute", svc, signal), JSON.parse(golden.plain_item));
  assert.equal(sent.length, 1, "kept");
});

test("an item with a goal's own key is not opened, and reads no key", async () => {
  const { svc, sent } = keyService(handed);
  assert.equal(await new QueueKeys(cfg).openItem(golden.goal_item, "execute", svc, signal), undefined);
  assert.equal(sent.length, 0);
});

test("a refused key is not asked for again for a minute", async () => {
  const { svc, sent } = keyService(() => ({ ok: false, error: { code: "forbidden", message: "not an executor of steps" } }));
  const qk = new QueueKeys(cfg);
  assert.equal(await qk.openItem(golden.item, "execute", svc, signal), undefined);
  assert.equal(await qk.openItem(golden.item, "execute", svc, signal), undefined);
  assert.equal(sent.length, 1);
});

test("a key handed for another queue or day, or of another size, or that does not open the item, is not used", async () => {
  const answers: ((b: { queue: string; epoch: number }) => Reply)[] = [
    (b) => ({ ok: true, result: { queue: "other", epoch: b.epoch, key: golden.queue_key } }),
    (b) => ({ ok: true, result: { queue: b.queue, epoch: b.epoch + 1, key: golden.queue_key } }),
    (b) => ({ ok: true, result: { queue: b.queue, epoch: b.epoch, key: golden.queue_key.slice(0, 40) } }),
    (b) => ({ ok: true, result: { queue: b.queue, epoch: b.epoch, key: Buffer.alloc(32, 9).toString("base64url") } }),
  ];
  for (const answer of answers) {
    const { svc, sent } = keyService(answer);
    assert.equal(await new QueueKeys(cfg).openItem(golden.item, "execute", svc, signal), undefined);
    assert.equal(sent.length, 1);
  }
  // An item of another queue (the key opens it: the queue is the item's, not the scope's) is not run.
  const { svc, sent } = keyService(handed);
  assert.equal(await new QueueKeys({ ...cfg, queue: "other" }).openItem(golden.item, "execute", svc, signal), undefined);
  assert.deepEqual(sent[0]?.body, { queue: "other", epoch: golden.epoch });
  // Nor does an item open in another workspace.
  assert.equal(await new QueueKeys({ ...cfg, workspace: "other" }).openItem(golden.item, "execute", svc, signal), undefined);
});

test("an item opened is run only as the kind the worker runs: an execute item is no verifier's", async () => {
  const { svc, sent } = keyService(handed);
  assert.equal(await new QueueKeys(cfg).openItem(golden.item, "verify", svc, signal), undefined);
  assert.equal(sent.length, 1, "the key was read: the item is checked once opened");
});
