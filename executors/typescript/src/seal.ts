import { createDecipheriv, hkdfSync } from "node:crypto";

// Sealed values (the wire contract's "dwr:sealed:1:<scope>:<base64url>",
// schemas/seal in Go): what this SDK needs to open the work items of its
// queue with the queue's key of the day. Only opening: the SDK never seals.
//
// A data key of 32 raw bytes opens with XChaCha20-Poly1305 under
// enc = HKDF-SHA256(raw, no salt, "dwr seal 1 encrypt"); a sealed value's
// body is base64url (no padding) of nonce(24) || ciphertext || tag(16), its
// associated data "dwr\0<workspace>\0<scope>", its plaintext the JSON value
// that replaces the whole quoted sealed string. Node's crypto has IETF
// ChaCha20-Poly1305 (12-byte nonce) but not the extended nonce: hchacha20
// derives the subkey of the first 16 nonce bytes (draft-irtf-cfrg-xchacha).

/** SealedPrefix begins every sealed value (schemas.SealedPrefix). */
export const SealedPrefix = "dwr:sealed:1:";

/** DataKeyBytes is the size of a raw data key. */
export const DataKeyBytes = 32;

const nonceBytes = 24;
const tagBytes = 16;

function rotl(v: number, n: number): number {
  return (v << n) | (v >>> (32 - n));
}

/**
 * hchacha20 returns the 32-byte subkey of key (32 bytes) and nonce (16
 * bytes): the ChaCha20 block function's 20 rounds without the final
 * addition, words 0–3 and 12–15 little-endian.
 */
export function hchacha20(key: Uint8Array, nonce: Uint8Array): Buffer {
  if (key.length !== 32 || nonce.length !== 16) throw new Error("dwr: hchacha20 takes a 32-byte key and a 16-byte nonce");
  const k = Buffer.from(key.buffer, key.byteOffset, key.length);
  const n = Buffer.from(nonce.buffer, nonce.byteOffset, nonce.length);
  const s = new Uint32Array(16);
  s[0] = 0x61707865;
  s[1] = 0x3320646e;
  s[2] = 0x79622d32;
  s[3] = 0x6b206574;
  for (let i = 0; i < 8; i++) s[4 + i] = k.readUInt32LE(4 * i);
  for (let i = 0; i < 4; i++) s[12 + i] = n.readUInt32LE(4 * i);
  const qr = (a: number, b: number, c: number, d: number) => {
    s[a] += s[b];
    s[d] = rotl(s[d] ^ s[a], 16);
    s[c] += s[d];
    s[b] = rotl(s[b] ^ s[c], 12);
    s[a] += s[b];
    s[d] = rotl(s[d] ^ s[a], 8);
    s[c] += s[d];
    s[b] = rotl(s[b] ^ s[c], 7);
  };
  for (let i = 0; i < 10; i++) {
    qr(0, 4, 8, 12);
    qr(1, 5, 9, 13);
    qr(2, 6, 10, 14);
    qr(3, 7, 11, 15);
    qr(0, 5, 10, 15);
    qr(1, 6, 11, 12);
    qr(2, 7, 8, 13);
    qr(3, 4, 9, 14);
  }
  const out = Buffer.alloc(32);
  for (let i = 0; i < 4; i++) {
    out.writeUInt32LE(s[i], 4 * i);
    out.writeUInt32LE(s[12 + i], 16 + 4 * i);
  }
  return out;
}

/**
 * xchacha20poly1305Open returns the plaintext of sealed (ciphertext || tag)
 * under key (32 bytes), nonce (24 bytes) and ad, and throws when it does
 * not open.
 */
export function xchacha20poly1305Open(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, ad: Uint8Array): Buffer {
  if (nonce.length !== nonceBytes) throw new Error("dwr: an XChaCha20-Poly1305 nonce has 24 bytes");
  if (sealed.length < tagBytes) throw new Error("dwr: a sealed value is malformed");
  const iv = Buffer.alloc(12);
  iv.set(nonce.subarray(16), 4);
  const d = createDecipheriv("chacha20-poly1305", hchacha20(key, nonce.subarray(0, 16)), iv, { authTagLength: tagBytes });
  const ct = sealed.subarray(0, sealed.length - tagBytes);
  d.setAAD(ad, { plaintextLength: ct.length });
  d.setAuthTag(sealed.subarray(sealed.length - tagBytes));
  const head = d.update(ct);
  return Buffer.concat([head, d.final()]); // final throws on a tag that does not match
}

/** aad binds a sealed value to its workspace and scope: it opens nowhere else. */
function aad(ws: string, scope: string): Buffer {
  return Buffer.from("dwr\x00" + ws + "\x00" + scope, "utf8");
}

const base64url = /^[A-Za-z0-9_-]*$/;

/** DataKey opens what a data key of the service sealed (schemas/seal's DataKey, opening only). */
export class DataKey {
  private constructor(private readonly enc: Buffer) {}

  /** of returns the data key of the 32 bytes raw; it throws on another size. */
  static of(raw: Uint8Array): DataKey {
    if (raw.length !== DataKeyBytes) throw new Error(`dwr: a data key has ${DataKeyBytes} bytes, not ${raw.length}`);
    return new DataKey(Buffer.from(hkdfSync("sha256", raw, Buffer.alloc(0), "dwr seal 1 encrypt", 32)));
  }

  /** openBytes returns the plaintext sealed (nonce || ciphertext || tag) in scope of workspace ws; it throws when it does not open there. */
  openBytes(ws: string, scope: string, sealed: Uint8Array): Buffer {
    if (sealed.length < nonceBytes + tagBytes) throw new Error("dwr: a sealed value is malformed");
    return xchacha20poly1305Open(this.enc, sealed.subarray(0, nonceBytes), sealed.subarray(nonceBytes), aad(ws, scope));
  }

  /** open returns the plaintext of a sealed value's body (the base64url after "<scope>:"). */
  open(ws: string, scope: string, body: string): Buffer {
    if (!base64url.test(body) || body.length % 4 === 1) throw new Error("dwr: a sealed value is malformed");
    return this.openBytes(ws, scope, Buffer.from(body, "base64url"));
  }
}

/**
 * eachSealed calls f for each sealed value in text, a JSON document, with
 * the index of its opening quote, its scope and body, and where it ends
 * (past its closing quote); it returns false at a malformed one. A sealed
 * prefix after an escaped quote is inside a string: text, skipped.
 */
function eachSealed(text: string, f: (start: number, scope: string, body: string, end: number) => void): boolean {
  const open = '"' + SealedPrefix;
  for (let i = text.indexOf(open); i >= 0; i = text.indexOf(open, i + 1)) {
    if (i > 0 && text[i - 1] === "\\") continue;
    const from = i + open.length;
    const end = text.indexOf('"', from);
    const colon = text.indexOf(":", from);
    if (end < 0 || colon < 0 || colon > end) return false;
    f(i, text.slice(from, colon), text.slice(colon + 1, end), end + 1);
    i = end;
  }
  return true;
}

/** scopes returns the scopes of the sealed values in text, each once, in the order they first appear ("" for a malformed one). */
export function scopes(text: string): string[] {
  const out: string[] = [];
  const ok = eachSealed(text, (_s, scope) => {
    if (!out.includes(scope)) out.push(scope);
  });
  if (!ok) out.push(""); // malformed: no scope opens it
  return out;
}

/** parseQueueScope returns the epoch (days since 1970-01-01 UTC) a queue key's scope "q.<epoch>" names, or undefined when scope is not one. */
export function parseQueueScope(scope: string): number | undefined {
  const m = /^q\.(0|[1-9][0-9]*)$/.exec(scope);
  if (!m) return undefined;
  const n = Number(m[1]);
  return Number.isSafeInteger(n) ? n : undefined;
}

/**
 * openAll returns text, a JSON document of workspace ws, with every sealed
 * value replaced by its plaintext, opened with the key keyOf returns for
 * its scope. It throws when a value is malformed, has no key, or does not
 * open: nothing is run from a payload that may have been tampered with.
 */
export function openAll(text: string, ws: string, keyOf: (scope: string) => DataKey | undefined): string {
  const parts: string[] = [];
  let last = 0;
  let err: Error | undefined;
  const ok = eachSealed(text, (start, scope, body, end) => {
    if (err) return;
    const k = keyOf(scope);
    if (!k) {
      err = new Error(`dwr: no key opens scope ${scope}`);
      return;
    }
    try {
      parts.push(text.slice(last, start), k.open(ws, scope, body).toString("utf8"));
    } catch (e) {
      err = new Error(`dwr: a sealed value of scope ${scope} does not open: ${(e as Error).message}`);
      return;
    }
    last = end;
  });
  if (!ok) throw new Error("dwr: a sealed value is malformed");
  if (err) throw err;
  if (last === 0) return text;
  parts.push(text.slice(last));
  return parts.join("");
}
