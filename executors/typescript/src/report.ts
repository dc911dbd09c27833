import { Cause, Failure, Permanent, causeOf } from "./errors.js";
import { WaitError, type Job, type Result } from "./job.js";
import { MaxPayloadBytes, type ArtifactRef, type ModelStep } from "./wire.js";
import type { Handler } from "./worker.js";

/** A failure's message is at most this many bytes; its code at most maxCode. */
export const maxMessage = 10000;
export const maxCode = 200;

/** Error codes the SDK reports on its own. */
export const SDKCode = {
  Timeout: "timeout",
  InvalidResult: "invalid_result",
  Dependencies: "dependencies_unavailable",
  Delegations: "delegations_unavailable",
} as const;

/** clip makes s at most n bytes of UTF-8 and never empty. */
export function clip(s: string, n: number): string {
  s = s.toWellFormed();
  if (Buffer.byteLength(s) > n) {
    let b = Buffer.from(s)
      .subarray(0, n - 3)
      .toString("utf8");
    if (b.endsWith("\uFFFD")) b = b.slice(0, -1);
    s = b + "...";
  }
  return s || "failed";
}

/** What a worker reports for a job: a success (output, JSON text), a failure, or a wait. */
export interface Report {
  output?: string; // JSON text
  artifacts?: ArtifactRef[];
  modelSteps?: ModelStep[];
  failure?: { code?: string; message: string; retryable: boolean };
  wait?: WaitError;
}

/**
 * reportFor returns what a worker reports for a handler's outcome — its
 * result res, or the error it threw — given the job's abort signal and the
 * model steps the job recorded: a WaitError becomes a wait; Permanent and
 * Failure keep their code and retryability; any other error is a retryable
 * failure (code "timeout" when the attempt passed its deadline); an output
 * that does not encode or is larger than 256 KiB is a failure that is not
 * retried (code "invalid_result").
 */
export function reportFor(abort: AbortSignal, res: Result | void, err: unknown, steps: ModelStep[]): Report {
  const modelSteps = [...steps, ...((res && res.modelSteps) ?? [])];
  const ms = modelSteps.length > 0 ? modelSteps : undefined;
  if (err instanceof WaitError) return { wait: err };
  if (err !== undefined) {
    let f: Report["failure"];
    if (err instanceof Permanent) f = { code: err.code, message: err.message, retryable: false };
    else if (err instanceof Failure) f = { code: err.code, message: err.message, retryable: err.retryable };
    else if (err instanceof Error) f = { message: err.message, retryable: true };
    else f = { message: String(err), retryable: true };
    if (f.code === undefined && abort.aborted && causeOf(abort.reason) === Cause.Timeout) f.code = SDKCode.Timeout;
    f.message = clip(f.message, maxMessage);
    if (f.code !== undefined) f.code = clip(f.code, maxCode);
    return { failure: f, modelSteps: ms };
  }
  let out: string | undefined;
  try {
    out = res && res.output !== undefined ? JSON.stringify(res.output) : undefined;
  } catch (e) {
    return {
      failure: {
        code: SDKCode.InvalidResult,
        message: clip("the result's output does not encode to JSON: " + (e as Error).message, maxMessage),
        retryable: false,
      },
      modelSteps: ms,
    };
  }
  if (out !== undefined && Buffer.byteLength(out) > MaxPayloadBytes) {
    return {
      failure: {
        code: SDKCode.InvalidResult,
        message: `the result's output is ${Buffer.byteLength(out)} bytes; at most ${MaxPayloadBytes} are allowed (store large outputs as artifacts)`,
        retryable: false,
      },
      modelSteps: ms,
    };
  }
  return { output: out, artifacts: (res && res.artifacts) || undefined, modelSteps: ms };
}

/**
 * runHandler runs handler on job and returns what a worker reports for it
 * (reportFor, given the job's abort signal and model steps). A throw of
 * undefined or null is an error too.
 */
export async function runHandler(handler: Handler, job: Job): Promise<Report> {
  let res: Result | void = undefined;
  let err: unknown;
  try {
    res = await handler(job);
  } catch (e) {
    err = e ?? new Error("the handler threw " + String(e));
  }
  return reportFor(job.abort, res, err, job.modelSteps);
}
