import type { WireError } from "./wire.js";

/**
 * DwrError is the service's refusal of a request (`{"ok": false, "error":
 * {code, message, fields}}`), or, with code "unavailable", a request that got
 * no dwr reply before its deadline.
 */
export class DwrError extends Error {
  /** invalid, not_found, conflict, forbidden, too_large, unavailable or internal. */
  readonly code: string;
  /** The first field the error names, as a JSON pointer ("/tasks/1/queue"), or "". */
  readonly field: string;
  /** Every field the error names, with what is wrong with it. */
  readonly fields: { pointer: string; message: string }[];
  /** When the request may be sent again (an early request), if said. */
  readonly retryAfter?: Date;

  constructor(e: WireError, what?: string) {
    super((what ? what + ": " : "") + e.code + ": " + e.message);
    this.name = "DwrError";
    this.code = e.code;
    this.fields = e.fields ?? [];
    this.field = this.fields[0]?.pointer ?? "";
    if (e.retry_after) this.retryAfter = new Date(e.retry_after);
  }
}

/**
 * Permanent is a failure that must not be retried: throw it from a handler
 * and the task fails at once, whatever its retry policy.
 */
export class Permanent extends Error {
  /** The error code reported (matched by a retry policy's non_retryable list). */
  readonly code: string | undefined;
  constructor(message: string, options?: { code?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "Permanent";
    this.code = options?.code;
  }
}

/**
 * Failure is a handler error with full control over what is reported: its
 * code, its message and whether the task may be retried.
 */
export class Failure extends Error {
  readonly code: string | undefined;
  readonly retryable: boolean;
  constructor(message: string, options: { code?: string; retryable: boolean; cause?: unknown }) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "Failure";
    this.code = options.code;
    this.retryable = options.retryable;
  }
}

/**
 * Why a job's abort signal fired: `job.abort.reason` is one of these
 * (an AbortReason whose `code` is one of these).
 */
export const Cause = {
  /** The task was cancelled, or ended (failed, rejected) while the attempt ran. */
  Cancelled: "cancelled",
  /** The attempt no longer holds the task: its lease lapsed and another attempt superseded it, or the service ended it. */
  LeaseLost: "lease_lost",
  /** The attempt passed its deadline (the task's per-attempt timeout). */
  Timeout: "timeout",
  /** The worker was stopped and its drain timeout passed before the job finished. */
  Stopping: "stopping",
} as const;

/** One of Cause's values. */
export type CauseName = (typeof Cause)[keyof typeof Cause];

/** AbortReason is the reason of an aborted job's signal: `job.abort.reason`. */
export class AbortReason extends Error {
  /** Why: one of Cause. */
  readonly code: CauseName;
  constructor(code: CauseName, message: string) {
    super(message);
    this.name = "AbortReason";
    this.code = code;
  }
}

/** The AbortReasons the worker aborts a job with. */
export const cancelled = () => new AbortReason(Cause.Cancelled, "dwr: the task was cancelled or has ended");
export const leaseLost = () =>
  new AbortReason(Cause.LeaseLost, "dwr: the attempt lost its lease; another attempt holds the task");
export const timedOut = () => new AbortReason(Cause.Timeout, "dwr: the attempt passed its deadline");
export const stopping = () => new AbortReason(Cause.Stopping, "dwr: the worker is stopping and the drain timeout has passed");

/** causeOf returns the cause of an abort signal's reason (one of Cause), if it is a dwr one. */
export function causeOf(reason: unknown): CauseName | undefined {
  return reason instanceof AbortReason ? reason.code : undefined;
}
