// Reads JSON documents, one a line, on stdin and prints, for each, one line
// of JSON: {"canonical", "digest"} as this package computes them — or
// {"error"} — so that integration/typescript_test.go
// (TestTypeScriptActionDigest) can hold them against the service's.
import { createInterface } from "node:readline";
import { canonicalJSON, digestOf } from "../canonical.js";

const rl = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  try {
    const canonical = canonicalJSON(line);
    process.stdout.write(JSON.stringify({ canonical, digest: digestOf(canonical) }) + "\n");
  } catch (e) {
    process.stdout.write(JSON.stringify({ error: (e as Error).message }) + "\n");
  }
}
