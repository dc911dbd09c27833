import { closeSync, openSync, readSync } from "node:fs";

/**
 * readBounded reads file, refusing it — before reading more than max+1
 * bytes — when it is larger than max bytes; what names the file in the
 * error.
 */
export function readBounded(file: string, max: number, what: string): Buffer {
  const fd = openSync(file, "r");
  try {
    const buf = Buffer.alloc(max + 1);
    let n = 0;
    for (;;) {
      const got = readSync(fd, buf, n, buf.length - n, null);
      if (got === 0) break;
      n += got;
      if (n > max) throw new Error(`dwr: ${what} ${file}: larger than ${max} bytes`);
    }
    return buf.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}
