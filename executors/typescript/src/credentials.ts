import { fromSeed } from "@nats-io/nkeys";
import { nkeyAuthenticator, type ConnectionOptions } from "@nats-io/transport-node";
import { readBounded } from "./files.js";

/** The largest credential file read: a seed and its comments. */
const maxCredsBytes = 64 << 10;

// A user nkey seed: "SU" and 56 more base32 characters.
const seedRe = /\bSU[A-Z2-7]{56}\b/;

/** A credential: the user's public key and the seed it signs with. */
export interface Credential {
  publicKey: string;
  seed: Uint8Array;
}

/**
 * readCredential reads a dwr credential file (what `dwr users add --out FILE`
 * writes, or the admin.creds `dwr serve` creates): the user nkey seed it
 * holds, and its public key. It throws when the file cannot be read, is
 * larger than 64 KiB, or holds no user nkey seed.
 */
export function readCredential(file: string): Credential {
  const buf = readBounded(file, maxCredsBytes, "credential");
  const m = seedRe.exec(buf.toString("utf8"));
  if (!m) throw new Error(`dwr: credential ${file}: holds no user nkey seed (a line "SU...")`);
  const seed = new TextEncoder().encode(m[0]);
  const kp = fromSeed(seed.slice()); // clear() wipes the array it was given
  const publicKey = kp.getPublicKey();
  kp.clear();
  return { publicKey, seed };
}

/** inboxPrefix is the inbox prefix the server lets the identity with this public key subscribe to. */
export function inboxPrefix(publicKey: string): string {
  return "_INBOX." + publicKey;
}

/**
 * credentialOptions returns the connection options that connect with a dwr
 * credential file: its nkey, and the inbox prefix that identity may use.
 * Pass them to `connect` with the server's URL:
 *
 *     const nc = await connect({ servers: url, ...credentialOptions("pay-1.creds") });
 */
export function credentialOptions(file: string): Pick<ConnectionOptions, "authenticator" | "inboxPrefix"> {
  const c = readCredential(file);
  return { authenticator: nkeyAuthenticator(c.seed), inboxPrefix: inboxPrefix(c.publicKey) };
}
