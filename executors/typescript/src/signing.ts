import { createPrivateKey, sign, type KeyObject } from "node:crypto";
import { readBounded } from "./files.js";

/** Opens every signed decision: a signature made for dwr approvals is taken for nothing else. */
export const DecisionPurpose = "dwr approval decision v1";

const maxKeyFile = 64 << 10;

/** An approver's signing key, as `dwr keys create` writes it (or any PKCS #8 Ed25519 PEM key). */
export interface SigningKey {
  key: KeyObject;
  /** The approver the file names on its "# approver:" line, or "". */
  approver: string;
  /** The workspace the file names on its "# workspace:" line, or "". */
  workspace: string;
}

/**
 * readSigningKey reads an approver's key file: a PEM "PRIVATE KEY" block
 * (PKCS #8 Ed25519) after "# approver:" and "# workspace:" comment lines.
 * It throws, saying what the file holds instead, when it is larger than 64
 * KiB or holds no Ed25519 private key.
 */
export function readSigningKey(file: string): SigningKey {
  const b = readBounded(file, maxKeyFile, "key file");
  const text = b.toString("utf8");
  let approver = "";
  let workspace = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line.startsWith("-----BEGIN")) break;
    if (line.startsWith("# approver:")) approver = line.slice("# approver:".length).trim();
    else if (line.startsWith("# workspace:")) workspace = line.slice("# workspace:".length).trim();
  }
  const m = /-----BEGIN PRIVATE KEY-----[\s\S]*?-----END PRIVATE KEY-----/.exec(text);
  if (!m)
    throw new Error(
      `dwr: key file ${file} holds no PEM "PRIVATE KEY" block: make one with \`dwr keys create NAME --role ROLE --out FILE\``,
    );
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: m[0], format: "pem" });
  } catch (e) {
    throw new Error(`dwr: key file ${file}: the PRIVATE KEY block does not parse (PKCS #8): ${(e as Error).message}`);
  }
  if (key.asymmetricKeyType !== "ed25519") {
    throw new Error(`dwr: key file ${file} holds a ${key.asymmetricKeyType} key, not an Ed25519 key`);
  }
  return { key, approver, workspace };
}

/** decisionMessage returns the bytes an approver signs: the purpose, the approval id, the response and the action digest, one a line. */
export function decisionMessage(approvalId: string, response: string, actionDigest: string): Buffer {
  return Buffer.from(`${DecisionPurpose}\n${approvalId}\n${response}\n${actionDigest}`, "utf8");
}

/** signDecision signs a decision with an approver's key: standard base64, as approval.decide carries it. */
export function signDecision(key: KeyObject, approvalId: string, response: string, actionDigest: string): string {
  return sign(null, decisionMessage(approvalId, response, actionDigest), key).toString("base64");
}
