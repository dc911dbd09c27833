// The SDK's own programs (the conformance executor, the benchmark's worker, the tests' workers and
// clients) run the same way: main, then the process's exit code; a worker until SIGTERM or SIGINT.
import type { NatsConnection } from "@nats-io/transport-node";

/** runProgram runs main and exits: 0 when it resolves, 1 when it rejects (printing the error after name). */
export function runProgram(name: string, main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(`${name}:`, e);
      process.exit(1);
    },
  );
}

/** needEnv returns the environment variable name, which program needs: unset or empty, it throws. */
export function needEnv(program: string, name: string): string {
  const v = process.env[name] ?? "";
  if (!v) throw new Error(`${program}: ${name} must be set`);
  return v;
}

/** runUntilStopped runs w until SIGTERM or SIGINT stops it (w drains its jobs), then drains nc. */
export async function runUntilStopped(w: { run(): Promise<void>; stop(): Promise<void> }, nc: NatsConnection): Promise<void> {
  const stop = () => void w.stop();
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  await w.run();
  await nc.drain();
}
