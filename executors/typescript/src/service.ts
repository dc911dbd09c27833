import { randomUUID } from "node:crypto";
import {
  PermissionViolationError,
  headers as natsHeaders,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
} from "@nats-io/transport-node";
import { DwrError } from "./errors.js";
import { Header, MaxMessageBytes, type Reply } from "./wire.js";

/** How long one try of a request waits for its reply. */
export const DefaultTimeoutMs = 5000;

const retryFirstMs = 100;
const retryMaxMs = 5000;

/** Options of one request. */
export interface CallOptions {
  /** The command id (Dwr-Command-Id): a retry with the same id is answered with the first outcome. Default: a fresh one. */
  commandId?: string;
  /** Ends the retries (and the wait for a reply). */
  signal?: AbortSignal;
  /** Send once: no retry on a timeout or an `unavailable` reply. */
  once?: boolean;
  /** How long one try waits for the reply; default 5 s. */
  timeoutMs?: number;
  /** Extra headers. */
  headers?: Record<string, string>;
  /** A query waits until the views reflect at least this log sequence (Dwr-Min-Seq), e.g. a work item's `seq`. */
  minSeq?: number;
  /**
   * The W3C traceparent of the trace the request belongs to (header `traceparent`), so that the service's
   * span of it joins that trace; "" sends none. Default: the Service's (the Client's, or the job's), if any.
   * A value that is not a valid traceparent is not sent.
   */
  traceparent?: string;
  /** The W3C tracestate sent with traceparent. */
  tracestate?: string;
}

/** A W3C trace context, as the `traceparent` and `tracestate` headers carry it. */
export interface TraceContext {
  traceparent: string;
  tracestate?: string;
}

// traceparent: version "00" (or a later one, which may add fields after a "-"), a trace id and a parent id
// that are not all zeros, and the flags; in lower-case hex.
export const traceparentRe = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const maxTracestate = 512;

/**
 * traceContextOf returns the trace context of a traceparent (and its tracestate), or undefined when
 * traceparent is not a valid W3C traceparent (version ff, an all-zero id, or more than 55 characters
 * for version 00): such a header is dropped rather than sent. A tracestate longer than 512 characters,
 * or one of characters a header cannot carry, is dropped.
 */
export function traceContextOf(traceparent?: string | null, tracestate?: string | null): TraceContext | undefined {
  if (!traceparent) return undefined;
  const tp = traceparent.trim();
  const m = traceparentRe.exec(tp);
  if (!m || m[1] === "ff" || /^0+$/.test(m[2]!) || /^0+$/.test(m[3]!) || (m[1] === "00" && m[5] !== undefined)) {
    return undefined;
  }
  const ts = tracestate?.trim();
  const ok = ts && ts.length <= maxTracestate && /^[\x20-\x7e]+$/.test(ts);
  return ok ? { traceparent: tp, tracestate: ts } : { traceparent: tp };
}

/**
 * Service is the dwr service as this package talks to it: request/reply on
 * `<prefix>.cmd.<workspace>.<command>` and `<prefix>.q.<workspace>.<query>`.
 * A request that gets no reply (a timeout, no responder) or an `unavailable`
 * reply is sent again — a command with the same command id — with backoff,
 * until it is answered or its signal aborts. Replies are checked to be at
 * most 1 MiB before they are decoded.
 */
export class Service {
  /** The highest log sequence a command was answered with: queries wait until the views reflect it. */
  private readonly seen: { minSeq: number };

  constructor(
    readonly nc: NatsConnection,
    readonly workspace = "default",
    readonly prefix = "dwr",
    /** The trace context every request carries unless its options give one. */
    readonly trace?: TraceContext,
    seen?: { minSeq: number },
  ) {
    this.seen = seen ?? { minSeq: 0 };
  }

  /**
   * traced returns this Service sending its requests in the trace context trace (none: without one),
   * reading its own writes as this one does (they share what the commands were answered with).
   */
  traced(trace?: TraceContext): Service {
    return new Service(this.nc, this.workspace, this.prefix, trace, this.seen);
  }

  /** command sends command name with body, and returns the service's reply, accepted or refused. */
  async command<T = unknown>(name: string, body: unknown, opts: CallOptions = {}): Promise<Reply<T>> {
    const id = opts.commandId ?? randomUUID();
    const r = await this.request<T>(`${this.prefix}.cmd.${this.workspace}.${name}`, encode(body), {
      ...opts,
      headers: { ...opts.headers, [Header.CommandID]: id },
    });
    if (r.ok && typeof r.seq === "number" && r.seq > this.seen.minSeq) this.seen.minSeq = r.seq;
    return r;
  }

  /** query sends query name with body, reading at least what this Service's commands wrote. */
  async query<T = unknown>(name: string, body: unknown, opts: CallOptions = {}): Promise<Reply<T>> {
    const subject = `${this.prefix}.q.${this.workspace}.${name}`;
    return decodeReply<T>(await this.queryBytes(name, body, opts), subject);
  }

  /**
   * queryBytes is query's reply as the service wrote it: to digest a part of
   * it byte for byte (numbers keep their digits, 1e21 is not 1e+21).
   */
  async queryBytes(name: string, body: unknown, opts: CallOptions = {}): Promise<Uint8Array> {
    const h: Record<string, string> = { ...opts.headers };
    const min = Math.max(this.seen.minSeq, opts.minSeq ?? 0);
    if (min > 0) h[Header.MinSeq] = String(min);
    const { data } = await this.raw(`${this.prefix}.q.${this.workspace}.${name}`, encode(body), { ...opts, headers: h }, true);
    return data;
  }

  /** request sends data to subject and returns the reply decoded, retrying as the class says. */
  async request<T>(subject: string, data: Uint8Array, opts: CallOptions): Promise<Reply<T>> {
    const { data: body } = await this.raw(subject, data, opts, true);
    return decodeReply<T>(body, subject);
  }

  /**
   * raw sends data to subject and returns the reply's body and headers,
   * retrying on no reply (and, when decoded, on an `unavailable` reply).
   */
  async raw(
    subject: string,
    data: Uint8Array,
    opts: CallOptions,
    decoded = false,
  ): Promise<{ data: Uint8Array; headers?: MsgHdrs }> {
    if (data.length > MaxMessageBytes) {
      throw new DwrError(
        { code: "too_large", message: `the request is ${data.length} bytes; at most ${MaxMessageBytes} are allowed` },
        subject,
      );
    }
    let h: MsgHdrs | undefined;
    const trace = opts.traceparent !== undefined ? traceContextOf(opts.traceparent, opts.tracestate) : this.trace;
    if ((opts.headers && Object.keys(opts.headers).length > 0) || trace) {
      h = natsHeaders();
      for (const [k, v] of Object.entries(opts.headers ?? {})) h.set(k, v);
      if (trace) {
        h.set(Header.Traceparent, trace.traceparent);
        if (trace.tracestate) h.set(Header.Tracestate, trace.tracestate);
      }
    }
    let wait = retryFirstMs;
    let last: unknown;
    for (let tries = 1; ; tries++) {
      if (opts.signal?.aborted) {
        if (tries === 1) opts.signal.throwIfAborted(); // aborted before it was sent
        break;
      }
      let pause = wait + Math.random() * (wait / 2);
      let m: Msg;
      try {
        m = await this.nc.request(subject, data, { timeout: opts.timeoutMs ?? DefaultTimeoutMs, headers: h });
      } catch (err) {
        const denied = permissionDenied(err);
        if (denied) {
          // The NATS server refused this credential the subject: no retry makes it pass.
          throw new DwrError(
            { code: "forbidden", message: `the NATS server refused this credential: ${denied.message}` },
            subject,
          );
        }
        if (opts.once || this.nc.isClosed()) throw err;
        last = err;
        await sleep(pause, opts.signal);
        wait = Math.min(2 * wait, retryMaxMs);
        continue;
      }
      if (m.data.length > MaxMessageBytes) {
        throw new DwrError(
          { code: "too_large", message: `the reply is ${m.data.length} bytes; more than ${MaxMessageBytes}` },
          subject,
        );
      }
      if (!decoded || opts.once) return { data: m.data, headers: m.headers };
      const r = decodeReply(m.data, subject); // a reply that is not a dwr reply: thrown, not retried
      if (r.ok || r.error?.code !== "unavailable") return { data: m.data, headers: m.headers };
      last = new DwrError(r.error, subject);
      if (r.error.retry_after) {
        const d = Math.min(Math.max(Date.parse(r.error.retry_after) - Date.now(), 0), retryMaxMs);
        pause = d + Math.random() * (d / 4 + 1);
        wait = retryFirstMs;
      }
      await sleep(pause, opts.signal);
      wait = Math.min(2 * wait, retryMaxMs);
    }
    const why = opts.signal?.reason instanceof Error ? opts.signal.reason.message : String(opts.signal?.reason);
    throw new DwrError(
      {
        code: "unavailable",
        message: `gave up retrying: ${why}; the last try: ${last instanceof Error ? last.message : String(last)}`,
      },
      subject,
    );
  }
}

/** permissionDenied returns the server's refusal of a subject to this connection, when err is one. */
function permissionDenied(err: unknown): PermissionViolationError | undefined {
  if (err instanceof PermissionViolationError) return err;
  if (err instanceof Error && err.cause instanceof PermissionViolationError) return err.cause;
  return undefined;
}

/** encode returns body as JSON bytes (a Uint8Array is sent as it is). */
export function encode(body: unknown): Uint8Array {
  if (body instanceof Uint8Array) return body;
  return new TextEncoder().encode(body === undefined ? "{}" : JSON.stringify(body));
}

/** decodeReply decodes a reply of at most 1 MiB. */
export function decodeReply<T>(data: Uint8Array, subject: string): Reply<T> {
  if (data.length > MaxMessageBytes) {
    throw new DwrError(
      { code: "too_large", message: `the reply is ${data.length} bytes; more than ${MaxMessageBytes}` },
      subject,
    );
  }
  let r: Reply<T>;
  try {
    r = JSON.parse(new TextDecoder().decode(data)) as Reply<T>;
  } catch (e) {
    throw new Error(`dwr: ${subject}: the reply is not JSON: ${(e as Error).message}`);
  }
  if (typeof r !== "object" || r === null || typeof r.ok !== "boolean") {
    throw new Error(`dwr: ${subject}: the reply is not a dwr reply (no "ok")`);
  }
  if (!r.ok && (typeof r.error !== "object" || r.error === null)) {
    throw new Error(`dwr: ${subject}: a refusal without its error`);
  }
  return r;
}

/** resultOf returns an accepted reply's result, or throws the refusal as a DwrError. */
export function resultOf<T>(r: Reply<T>, what: string): T {
  if (!r.ok) throw new DwrError(r.error!, what);
  return r.result as T;
}

/** sleep waits ms, or until signal aborts (then it resolves early). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
