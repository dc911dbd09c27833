import { createHash, randomUUID } from "node:crypto";
import { extname } from "node:path";
import { DwrError } from "./errors.js";
import { decodeReply, encode, resultOf, type Service } from "./service.js";
import { Header, type ArtifactRef } from "./wire.js";

/** One chunk of an upload or a download is at most this large. */
export const ArtifactChunkBytes = 256 << 10;

/** What the store holds under a digest. */
export interface ArtifactInfo {
  sha256: string;
  size: number;
  chunks: number;
  name?: string;
  type?: string;
  task_id?: string;
  stored_at: string;
  duplicate?: boolean;
}

/** Describes an artifact being stored. */
export interface ArtifactMeta {
  name?: string;
  type?: string;
  taskId?: string;
}

const mediaTypes: Record<string, string> = {
  ".txt": "text/plain",
  ".json": "application/json",
  ".html": "text/html",
  ".csv": "text/csv",
  ".md": "text/markdown",
  ".pdf": "application/pdf",
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".xml": "application/xml",
  ".zip": "application/zip",
};

/** mediaType returns the media type a file name's extension says, or "". */
export function mediaType(name: string): string {
  return mediaTypes[extname(name).toLowerCase()] ?? "";
}

/**
 * putArtifact stores bytes in the workspace's artifact store, chunk by
 * chunk, and returns what the store holds: the service checks the chunks
 * against the size and SHA-256 given.
 */
export async function putArtifact(
  svc: Service,
  bytes: Uint8Array | string,
  meta: ArtifactMeta,
  signal?: AbortSignal,
): Promise<ArtifactInfo> {
  const data = typeof bytes === "string" ? new TextEncoder().encode(bytes) : bytes;
  const upload = randomUUID().replaceAll("-", "");
  let chunks = 0;
  for (let off = 0; off < data.length; off += ArtifactChunkBytes, chunks++) {
    const chunk = data.subarray(off, off + ArtifactChunkBytes);
    const r = await svc.request(`${svc.prefix}.q.${svc.workspace}.artifact.chunk`, chunk, {
      signal,
      headers: { [Header.Upload]: upload, [Header.Chunk]: String(chunks) },
    });
    resultOf(r, "artifact.chunk");
  }
  const sha256 = createHash("sha256").update(data).digest("hex");
  const type = meta.type ?? (meta.name ? mediaType(meta.name) : "");
  const put = { upload, chunks, size: data.length, sha256, name: meta.name, type: type || undefined, task_id: meta.taskId };
  const r = await svc.query<ArtifactInfo>("artifact.put", put, {
    signal,
    timeoutMs: 30000 + Math.floor(data.length / (2 << 20)) * 1000,
  });
  return resultOf(r, "artifact.put");
}

/** refOf returns the reference a report or a verdict carries for a stored artifact. */
export function refOf(info: ArtifactInfo): ArtifactRef {
  const ref: ArtifactRef = { name: info.name || info.sha256, sha256: info.sha256, size: info.size };
  if (info.type) ref.type = info.type;
  return ref;
}

/**
 * getArtifact reads the artifact stored under sha256, chunk by chunk, and
 * checks the bytes against the digest (the store is not trusted for them).
 * It refuses an artifact larger than maxBytes (default 64 MiB) before
 * reading it.
 */
export async function getArtifact(
  svc: Service,
  sha256: string,
  opts: { signal?: AbortSignal; maxBytes?: number } = {},
): Promise<Uint8Array> {
  if (!/^[0-9a-f]{64}$/.test(sha256)) {
    throw new DwrError({
      code: "invalid",
      message: "/sha256: must be 64 lower-case hex digits",
      fields: [{ pointer: "/sha256", message: "must be 64 lower-case hex digits" }],
    });
  }
  const maxBytes = opts.maxBytes ?? 64 << 20;
  const parts: Uint8Array[] = [];
  const h = createHash("sha256");
  let after = 0;
  let total = -1;
  let got = 0;
  for (let n = 0; total < 0 || n < total; n++) {
    const subject = `${svc.prefix}.q.${svc.workspace}.artifact.get`;
    const m = await svc.raw(subject, encode({ sha256, after }), { signal: opts.signal });
    const seq = m.headers?.get(Header.ChunkSeq);
    if (!seq) {
      resultOf(decodeReply(m.data, subject), "artifact.get");
      throw new Error("dwr: artifact.get: a reply without its chunk");
    }
    const size = Number(m.headers?.get(Header.ArtifactSize));
    if (size > maxBytes)
      throw new DwrError({
        code: "too_large",
        message: `artifact ${sha256} is ${size} bytes; more than the ${maxBytes} asked for`,
      });
    total = Number(m.headers?.get(Header.ArtifactChunks));
    after = Number(seq);
    got += m.data.length;
    if (got > maxBytes)
      throw new DwrError({ code: "too_large", message: `artifact ${sha256} is larger than the ${maxBytes} bytes asked for` });
    h.update(m.data);
    parts.push(m.data);
  }
  if (h.digest("hex") !== sha256) throw new Error(`dwr: artifact ${sha256}: the bytes read do not have its digest`);
  return Buffer.concat(parts);
}
