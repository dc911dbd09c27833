// The TypeScript SDK's worker under `dwr bench chain3 --worker-sdk
// typescript` (integration/bench): `node dist/bench_worker.js` serves the
// benchmark's queue with the handler the Go workers run there — it returns
// {"ok": true} — until SIGTERM, then drains.
//
// Environment (set by the benchmark): DWR_SERVER, DWR_CREDS (none when the
// service is open), BENCH_QUEUE, BENCH_CONCURRENCY (jobs at once) and
// BENCH_EXECUTOR (the executor's name). It writes the line "ready" to stdout
// once the worker takes work from the queue (the SDK's "taking work" log), so
// that the benchmark measures nothing of its start.
import { connect } from "@nats-io/transport-node";
import { Worker, credentialOptions, type Logger } from "./index.js";
import { needEnv, runProgram, runUntilStopped } from "./program.js";

// What the Go workers' handler returns (integration/bench/chain.go).
const output = { ok: true };

const need = (name: string) => needEnv("bench_worker", name);

async function main() {
  const server = need("DWR_SERVER");
  const queue = need("BENCH_QUEUE");
  const executor = need("BENCH_EXECUTOR");
  const concurrency = Number(need("BENCH_CONCURRENCY"));
  if (!Number.isInteger(concurrency))
    throw new Error(`bench_worker: BENCH_CONCURRENCY: "${process.env.BENCH_CONCURRENCY}" is not a whole number`);
  const creds = process.env.DWR_CREDS ?? "";
  const nc = await connect({ servers: server, name: executor, ...(creds ? credentialOptions(creds) : {}) });
  let ready = false;
  const logger: Logger = {
    debug() {},
    info(msg: string) {
      if (!ready && msg.startsWith("dwr: taking work from queue")) {
        ready = true;
        process.stdout.write("ready\n");
      }
    },
    warn: (msg, ...args) => console.error("tsbench", msg, ...args),
    error: (msg, ...args) => console.error("tsbench", msg, ...args),
  };
  const w = new Worker({ nc, queue, executor, concurrency, drainTimeoutMs: 1000, logger }, async () => ({ output }));
  await runUntilStopped(w, nc);
}

runProgram("tsbench", main);
