// Unit tests of sealed values (seal.ts): HChaCha20 and XChaCha20-Poly1305
// against draft-irtf-cfrg-xchacha's vectors, and the values the Go code
// sealed (schemas/seal/testdata/sealed.json, which schemas/seal's
// TestGoldenSealedValues checks Go still makes) opened here.
import assert from "node:assert/strict";
import { test } from "node:test";
import { golden } from "./golden.js";
import { DataKey, hchacha20, openAll, parseQueueScope, scopes, xchacha20poly1305Open } from "../seal.js";

const hex = (s: string) => Buffer.from(s.replace(/[^0-9a-f]/g, ""), "hex");

const queueKey = DataKey.of(Buffer.from(golden.queue_key, "base64url"));
const goalKey = DataKey.of(Buffer.from(golden.goal_key, "base64url"));
const queueScope = "q." + golden.epoch;
const keyOf = (scope: string) => (scope === queueScope ? queueKey : scope === golden.goal_scope ? goalKey : undefined);

/** body returns a sealed value's base64url body, after "dwr:sealed:1:<scope>:". */
const body = (sealed: string) => sealed.slice(sealed.indexOf(":", "dwr:sealed:1:".length) + 1);

test("HChaCha20 makes the draft's subkey (draft-irtf-cfrg-xchacha 2.2.1)", () => {
  const key = hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  const nonce = hex("000000090000004a0000000031415927");
  assert.equal(hchacha20(key, nonce).toString("hex"), "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc");
});

test("XChaCha20-Poly1305 opens the draft's AEAD vector (draft-irtf-cfrg-xchacha A.3.1), and not once tampered", () => {
  const plaintext = hex(
    "4c616469657320616e642047656e746c656d656e206f662074686520636c617373206f66202739393a204966204920636f756c64206f6666657220796f75206f6e6c79206f6e652074697020666f7220746865206675747572652c2073756e73637265656e20776f756c642062652069742e",
  );
  const ad = hex("50515253c0c1c2c3c4c5c6c7");
  const key = hex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f");
  const nonce = hex("404142434445464748494a4b4c4d4e4f5051525354555657");
  const sealed = hex(
    "bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b4522f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff921f9664c97637da9768812f615c68b13b52ec0875924c1c7987947deafd8780acf49",
  );
  assert.deepEqual(xchacha20poly1305Open(key, nonce, sealed, ad), plaintext);
  const bad = Buffer.from(sealed);
  bad[3] ^= 1;
  assert.throws(() => xchacha20poly1305Open(key, nonce, bad, ad));
  assert.throws(() => xchacha20poly1305Open(key, nonce, sealed, hex("50515253c0c1c2c3c4c5c6c8")));
});

test("values the Go code sealed open with their keys, to the exact JSON text sealed", () => {
  assert.ok(golden.values.length >= 2);
  for (const v of golden.values) {
    const k = keyOf(v.scope);
    assert.ok(k, v.scope);
    assert.equal(k.open(golden.workspace, v.scope, body(v.sealed)).toString("utf8"), v.plaintext);
  }
});

test("a sealed value opens in its workspace and scope only, untampered, with its key", () => {
  const v = golden.values.find((x) => x.scope === queueScope)!;
  const b = body(v.sealed);
  assert.throws(() => queueKey.open("other", v.scope, b), "another workspace");
  assert.throws(() => queueKey.open(golden.workspace, "q." + (golden.epoch + 1), b), "another day");
  assert.throws(() => goalKey.open(golden.workspace, v.scope, b), "another key");
  const flipped = b.slice(0, 40) + (b[40] === "A" ? "B" : "A") + b.slice(41);
  assert.throws(() => queueKey.open(golden.workspace, v.scope, flipped), "a changed byte");
  assert.throws(() => queueKey.open(golden.workspace, v.scope, b.slice(0, 50)), "too short");
  assert.throws(() => queueKey.open(golden.workspace, v.scope, b + "="), "not base64url");
  assert.throws(() => DataKey.of(Buffer.alloc(31)));
});

test("a work item the Go code sealed opens whole; a sealed prefix inside a string is text", () => {
  assert.deepEqual(scopes(golden.item), [queueScope]);
  assert.deepEqual(scopes(golden.goal_item), [queueScope, golden.goal_scope]);
  assert.deepEqual(scopes(golden.plain_item), [], "the escaped prefix in the note is text, no scope");
  assert.equal(openAll(golden.item, golden.workspace, keyOf), golden.plain_item);
  assert.equal(openAll(golden.goal_item, golden.workspace, keyOf), golden.plain_item);
  assert.equal(openAll(golden.plain_item, golden.workspace, keyOf), golden.plain_item);
  const it = JSON.parse(openAll(golden.item, golden.workspace, keyOf));
  assert.equal(it.task.spec.input.secret, "secret-c");
  assert.equal(it.dependencies[0].result, "secret-b+secret-a");
  // Without the goal's key, or in another workspace, nothing is opened.
  assert.throws(() => openAll(golden.goal_item, golden.workspace, (s) => (s === queueScope ? queueKey : undefined)));
  assert.throws(() => openAll(golden.item, "other", keyOf));
  // A sealed value cut short (no closing quote) is malformed.
  assert.deepEqual(scopes('{"a":"dwr:sealed:1:q.1'), [""]);
  assert.throws(() => openAll('{"a":"dwr:sealed:1:q.1', golden.workspace, keyOf));
});

test("queue scopes name a day: q.<days>, canonical", () => {
  assert.equal(parseQueueScope(queueScope), golden.epoch);
  assert.equal(parseQueueScope("q.0"), 0);
  for (const bad of ["w", "g.01ABC", "q.", "q.-1", "q.01", "q.1x", "q", "q.1e3", " q.1", "q.99999999999999999999"]) {
    assert.equal(parseQueueScope(bad), undefined, bad);
  }
});
