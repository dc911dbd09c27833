// A dwr credential file in the browser: its NATS user seed becomes a
// WebCrypto Ed25519 key that signs the NATS server's nonce at sign-in. The
// seed is never sent anywhere; only the public key and the signature are.
"use strict";

(function () {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

  function base32Decode(s) {
    const out = [];
    let bits = 0, value = 0;
    for (const c of s) {
      const v = alphabet.indexOf(c);
      if (v < 0) throw new Error("the seed is not base32");
      value = (value << 5) | v;
      bits += 5;
      if (bits >= 8) {
        out.push((value >>> (bits - 8)) & 0xff);
        bits -= 8;
      }
    }
    return new Uint8Array(out);
  }

  function base32Encode(bytes) {
    let out = "", bits = 0, value = 0;
    for (const b of bytes) {
      value = (value << 8) | b;
      bits += 8;
      while (bits >= 5) {
        out += alphabet[(value >>> (bits - 5)) & 31];
        bits -= 5;
      }
    }
    if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
    return out;
  }

  // crc16 is CRC-16/XMODEM, the checksum of nkeys.
  function crc16(bytes) {
    let crc = 0;
    for (const b of bytes) {
      crc ^= b << 8;
      for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
  }

  const prefixSeed = 18 << 3, prefixUser = 20 << 3;
  // PKCS #8 of an Ed25519 private key: this prefix, then the 32-byte seed.
  const pkcs8Prefix = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

  // read reads a credential file's text: the user seed (a line "SU..."),
  // and what the file says of itself ("# dwr credential: ..."). It returns
  // the public key (U...), that description and a non-extractable signing
  // key.
  async function read(text) {
    const m = /\bSU[A-Z2-7]{56}\b/.exec(text);
    if (!m) throw new Error("no NATS user seed in this file: pick a dwr credential file (dwr users add --out, or dwr-data/admin.creds)");
    const raw = base32Decode(m[0]);
    const sum = raw[34] | (raw[35] << 8);
    if (raw.length !== 36 || crc16(raw.subarray(0, 34)) !== sum) throw new Error("the seed in this file is damaged (its checksum fails)");
    if ((raw[0] & 0xf8) !== prefixSeed || (((raw[0] & 7) << 5) | ((raw[1] & 0xf8) >> 3)) !== prefixUser) {
      throw new Error("the seed in this file is not a user's");
    }
    const der = new Uint8Array(pkcs8Prefix.length + 32);
    der.set(pkcs8Prefix);
    der.set(raw.subarray(2, 34), pkcs8Prefix.length);
    try {
      const extractable = await crypto.subtle.importKey("pkcs8", der, { name: "Ed25519" }, true, ["sign"]);
      const jwk = await crypto.subtle.exportKey("jwk", extractable);
      const x = Uint8Array.from(atob(jwk.x.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));
      const pub = new Uint8Array(35);
      pub[0] = prefixUser;
      pub.set(x, 1);
      const c = crc16(pub.subarray(0, 33));
      pub[33] = c & 0xff;
      pub[34] = c >> 8;
      const key = await crypto.subtle.importKey("pkcs8", der, { name: "Ed25519" }, false, ["sign"]);
      const about = (/^#\s*dwr credential:\s*(.*)$/m.exec(text) || [])[1] || "";
      return { publicKey: base32Encode(pub), about: about.slice(0, 200), key };
    } finally {
      der.fill(0);
      raw.fill(0);
    }
  }

  async function signNonce(key, nonceB64) {
    const nonce = Uint8Array.from(atob(nonceB64), (c) => c.charCodeAt(0));
    const sig = new Uint8Array(await crypto.subtle.sign("Ed25519", key, nonce));
    return btoa(String.fromCharCode(...sig));
  }

  window.dwrCredential = { read, signNonce };
})();
