import { checkItem } from "./delivery.js";
import { DataKey, DataKeyBytes, openAll, parseQueueScope, scopes } from "./seal.js";
import { encode, type Service } from "./service.js";
import type { Config } from "./worker.js";
import type { WorkItem } from "./wire.js";

// Work items the worker opens itself (as the Go SDK's,
// executors/queue_keys.go). With encryption on, the service seals an
// execute item's payloads (its task's input, results, checkpoint, its
// dependencies' results) with its queue's key of the day, a verify item's
// (the input and the result it judges, earlier attempts, verifications)
// with its verification queue's, and the worker
// reads that key once a day with the queue.key query (only the queue's
// executors may), opening each item in memory: the job runs on the item
// alone, as with encryption off, instead of reading its task and each
// dependency again with task.get. An item that also carries payloads sealed
// with another key (a goal's own, which can be shredded alone), or whose
// key cannot be read (a service that does not hand queue keys, a shredded
// workspace), runs as before: from task.get.

/** queueKeyRetryMs is how long a key the service did not hand is not asked for again: items run from task.get meanwhile. */
export const queueKeyRetryMs = 60_000;

/** The queue.key query's answer. */
interface QueueKeyReply {
  queue: string;
  epoch: number;
  key: string;
}

/** QueueKeys are a worker's queue keys, by epoch (a day): read once, one read at a time. */
export class QueueKeys {
  private readonly keys = new Map<number, DataKey>();
  private readonly failed = new Map<number, number>(); // epochs whose key was not handed, and when
  private lock: Promise<unknown> = Promise.resolve();

  constructor(private readonly c: Config) {}

  /**
   * openItem returns text, a sealed item of kind ("execute", or "verify"
   * on a verification queue) of the worker's queue, opened and checked, or
   * undefined when it holds a value the worker cannot open itself (then it
   * reads its task, as before).
   */
  async openItem(text: string, kind: string, svc: Service, signal: AbortSignal): Promise<WorkItem | undefined> {
    const epochs = new Map<string, number>();
    for (const scope of scopes(text)) {
      const epoch = parseQueueScope(scope);
      if (epoch === undefined) return undefined; // not sealed with a queue key: no key read for it
      epochs.set(scope, epoch);
    }
    const keys = new Map<string, DataKey>();
    for (const [scope, epoch] of epochs) {
      try {
        keys.set(scope, await this.key(epoch, svc, signal));
      } catch (e) {
        this.c.log.debug(`dwr: an item's queue key cannot be read; reading its task instead: ${(e as Error).message}`);
        return undefined;
      }
    }
    try {
      const it = JSON.parse(openAll(text, this.c.workspace, (scope) => keys.get(scope))) as WorkItem;
      checkItem(it, this.c, kind);
      return it;
    } catch (e) {
      this.c.log.warn(`dwr: a work item does not open with its queue key; reading its task instead: ${(e as Error).message}`);
      return undefined;
    }
  }

  /** key returns the queue's key of epoch: from memory, or read with queue.key (a refusal is remembered for queueKeyRetryMs). */
  key(epoch: number, svc: Service, signal: AbortSignal): Promise<DataKey> {
    // One read at a time: the others wait for it, and find its key.
    const run = this.lock.then(() => this.keyLocked(epoch, svc, signal));
    this.lock = run.catch(() => undefined);
    return run;
  }

  private async keyLocked(epoch: number, svc: Service, signal: AbortSignal): Promise<DataKey> {
    const k = this.keys.get(epoch);
    if (k) return k;
    const at = this.failed.get(epoch);
    if (at !== undefined && Date.now() - at < queueKeyRetryMs) throw new Error("dwr: the queue key was not handed a moment ago");
    let key: DataKey;
    try {
      key = await this.read(epoch, svc, signal);
    } catch (e) {
      this.failed.set(epoch, Date.now());
      throw e;
    }
    this.failed.delete(epoch);
    for (const e of this.keys.keys()) if (e < epoch - 1) this.keys.delete(e); // a day's items are not sealed with an older day's key
    this.keys.set(epoch, key);
    return key;
  }

  private async read(epoch: number, svc: Service, signal: AbortSignal): Promise<DataKey> {
    const c = this.c;
    // Sent without Dwr-Min-Seq: the key is no view's, nothing to wait for.
    const r = await svc.request<QueueKeyReply>(`${c.prefix}.q.${c.workspace}.queue.key`, encode({ queue: c.queue, epoch }), {
      signal,
    });
    if (!r.ok) throw new Error(`dwr: queue.key refused: ${r.error?.code}: ${r.error?.message}`);
    const res = r.result;
    const raw = typeof res?.key === "string" && /^[A-Za-z0-9_-]*$/.test(res.key) ? Buffer.from(res.key, "base64url") : undefined;
    if (!res || res.queue !== c.queue || res.epoch !== epoch || raw?.length !== DataKeyBytes) {
      throw new Error("dwr: queue.key answered another key");
    }
    return DataKey.of(raw);
  }
}
