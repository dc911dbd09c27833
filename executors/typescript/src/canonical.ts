import { createHash } from "node:crypto";

/** The prefix of an action digest: it names the hash. */
export const ActionDigestPrefix = "sha256:";

const maxDepth = 32;

// A number as written in the document: its digits are kept.
class Num {
  constructor(readonly text: string) {}
}
type Value = null | boolean | string | Num | Value[] | Map<string, Value>;

/**
 * canonicalJSON re-encodes a JSON document with its object keys sorted (by
 * their UTF-8 bytes), no insignificant space, numbers as written and no HTML
 * escaping: the form an action digest is taken of, byte for byte, as the
 * service computes it (schemas.CanonicalJSON). It throws when text is not
 * exactly one JSON value, or nests deeper than 32 levels.
 */
export function canonicalJSON(text: string): string {
  const p = new Parser(text);
  p.space();
  const v = p.value(0);
  p.space();
  if (p.i !== text.length) throw new Error("dwr: the action holds more than one JSON value");
  return encode(v);
}

/**
 * canonicalAt is canonicalJSON of the member at path (object keys, from the
 * top) of the JSON document text: a part of a reply, with its numbers as the
 * service wrote them. The member may nest 32 levels below path. It throws
 * when text is not exactly one JSON value or has no member at path.
 */
export function canonicalAt(text: string, path: readonly string[]): string {
  const p = new Parser(text);
  p.space();
  let v = p.value(-path.length);
  p.space();
  if (p.i !== text.length) throw new Error("dwr: the document holds more than one JSON value");
  for (const k of path) {
    if (!(v instanceof Map) || !v.has(k)) throw new Error(`dwr: the document has no ${path.join(".")}`);
    v = v.get(k)!;
  }
  return encode(v);
}

/**
 * actionDigest returns the digest the service records for an action, and the
 * one an approver signs: "sha256:" and the hex SHA-256 of the action's
 * canonical JSON. The action is encoded with JSON.stringify first.
 */
export function actionDigest(action: unknown): string {
  const text = JSON.stringify(action);
  if (text === undefined) throw new Error("dwr: the action does not encode to JSON");
  return digestOf(canonicalJSON(text));
}

/** digestOf returns "sha256:" and the hex SHA-256 of canonical JSON text. */
export function digestOf(canonical: string): string {
  return ActionDigestPrefix + createHash("sha256").update(canonical, "utf8").digest("hex");
}

function encode(v: Value): string {
  if (v === null) return "null";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "string") return encodeString(v);
  if (v instanceof Num) return v.text;
  if (Array.isArray(v)) return "[" + v.map(encode).join(",") + "]";
  const keys = [...v.keys()].sort((a, b) => Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8")));
  return "{" + keys.map((k) => encodeString(k) + ":" + encode(v.get(k)!)).join(",") + "}";
}

// encodeString encodes s as Go's encoding/json does without HTML escaping:
// JSON.stringify's form, but with U+2028 and U+2029 escaped, and lone
// surrogates (invalid UTF-8 in Go) replaced by U+FFFD.
function encodeString(s: string): string {
  const fixed = s.toWellFormed();
  return JSON.stringify(fixed)
    .replace(/\u2028/g, "\\u2028")
    .replace(/\u2029/g, "\\u2029");
}

class Parser {
  i = 0;
  constructor(readonly s: string) {}

  fail(what: string): never {
    throw new Error(`dwr: the action is not JSON: ${what} at offset ${this.i}`);
  }

  space() {
    while (this.i < this.s.length && " \t\r\n".includes(this.s[this.i]!)) this.i++;
  }

  value(depth: number): Value {
    if (depth > maxDepth) this.fail(`nested deeper than ${maxDepth} levels`);
    const c = this.s[this.i];
    switch (c) {
      case "{": {
        const m = new Map<string, Value>();
        this.members("}", () => {
          if (this.s[this.i] !== '"') this.fail("expected a key");
          const k = this.string();
          this.space();
          if (this.s[this.i] !== ":") this.fail("expected ':'");
          this.i++;
          this.space();
          m.set(k, this.value(depth + 1)); // a repeated key: the last one, as Go decodes it
        });
        return m;
      }
      case "[": {
        const a: Value[] = [];
        this.members("]", () => a.push(this.value(depth + 1)));
        return a;
      }
      case '"':
        return this.string();
      case "t":
        return this.literal("true", true);
      case "f":
        return this.literal("false", false);
      case "n":
        return this.literal("null", null);
    }
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.s.slice(this.i, this.i + 1100));
    if (!m || m[0] === "" || m[0] === "-") this.fail("unexpected character");
    this.i += m[0].length;
    return new Num(m[0]);
  }

  /**
   * members reads an object's or an array's members, from its opening bracket to close: none, or each
   * read by member (from its first character) and followed by ',' or close.
   */
  members(close: "}" | "]", member: () => void): void {
    this.i++;
    this.space();
    if (this.s[this.i] === close) {
      this.i++;
      return;
    }
    for (;;) {
      this.space();
      member();
      this.space();
      if (this.s[this.i] === ",") {
        this.i++;
        continue;
      }
      if (this.s[this.i] === close) {
        this.i++;
        return;
      }
      this.fail(`expected ',' or '${close}'`);
    }
  }

  literal<T>(word: string, v: T): T {
    if (this.s.startsWith(word, this.i)) {
      this.i += word.length;
      return v;
    }
    this.fail("unexpected literal");
  }

  string(): string {
    const start = this.i;
    this.i++;
    for (;;) {
      const c = this.s[this.i];
      if (c === undefined) this.fail("unterminated string");
      if (c === "\\") {
        this.i += 2;
        continue;
      }
      this.i++;
      if (c === '"') break;
    }
    return JSON.parse(this.s.slice(start, this.i)) as string;
  }
}
