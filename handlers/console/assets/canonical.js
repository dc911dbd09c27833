// Canonical JSON and action digests, as the service computes them
// (schemas.CanonicalJSON): object keys sorted by their UTF-8 bytes, the
// last of duplicate keys kept, no insignificant space, numbers exactly as
// written, strings escaped as Go's encoding/json escapes them without HTML
// escaping. It works on the action's text: JSON.parse would lose how its
// numbers are written.
"use strict";

(function () {
  function parse(text) {
    let i = 0;
    const ws = () => { while (i < text.length && " \t\n\r".includes(text[i])) i++; };
    const fail = (what) => { throw new Error("the action is not JSON: " + what + " at " + i); };
    function value() {
      ws();
      const c = text[i];
      if (c === "{") {
        i++;
        const obj = new Map();
        ws();
        if (text[i] === "}") { i++; return { t: "o", v: obj }; }
        for (;;) {
          ws();
          if (text[i] !== '"') fail("a key expected");
          const k = string();
          ws();
          if (text[i] !== ":") fail("':' expected");
          i++;
          obj.delete(k);
          obj.set(k, value());
          ws();
          if (text[i] === ",") { i++; continue; }
          if (text[i] === "}") { i++; return { t: "o", v: obj }; }
          fail("',' or '}' expected");
        }
      }
      if (c === "[") {
        i++;
        const arr = [];
        ws();
        if (text[i] === "]") { i++; return { t: "a", v: arr }; }
        for (;;) {
          arr.push(value());
          ws();
          if (text[i] === ",") { i++; continue; }
          if (text[i] === "]") { i++; return { t: "a", v: arr }; }
          fail("',' or ']' expected");
        }
      }
      if (c === '"') return { t: "s", v: string() };
      for (const lit of ["true", "false", "null"]) {
        if (text.startsWith(lit, i)) { i += lit.length; return { t: "l", v: lit }; }
      }
      const m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i));
      if (!m) fail("a value expected");
      i += m[0].length;
      return { t: "n", v: m[0] };
    }
    function string() {
      const start = i;
      i++;
      while (i < text.length && text[i] !== '"') {
        if (text[i] === "\\") i++;
        i++;
      }
      if (i >= text.length) fail("unterminated string");
      i++;
      return JSON.parse(text.slice(start, i));
    }
    const v = value();
    ws();
    if (i !== text.length) fail("more than one value");
    return v;
  }

  const enc = new TextEncoder();
  function byteCompare(a, b) {
    const x = enc.encode(a), y = enc.encode(b);
    for (let k = 0; k < Math.min(x.length, y.length); k++) {
      if (x[k] !== y[k]) return x[k] - y[k];
    }
    return x.length - y.length;
  }

  function quote(s) {
    // JSON.stringify escapes as Go does (lower-case \u00xx, \b \f \n \r
    // \t), but for U+2028 and U+2029, which Go escapes too; Go turns lone
    // surrogates (invalid UTF-8) into U+FFFD.
    return JSON.stringify(s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd"))
      .replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
  }

  function write(n) {
    switch (n.t) {
      case "o":
        return "{" + [...n.v.keys()].sort(byteCompare).map((k) => quote(k) + ":" + write(n.v.get(k))).join(",") + "}";
      case "a":
        return "[" + n.v.map(write).join(",") + "]";
      case "s":
        return quote(n.v);
      default:
        return n.v;
    }
  }

  async function actionDigest(text) {
    const canon = enc.encode(write(parse(text)));
    const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", canon));
    return "sha256:" + [...sum].map((b) => b.toString(16).padStart(2, "0")).join("");
  }

  window.dwrCanonical = { canonical: (text) => write(parse(text)), actionDigest };
})();
