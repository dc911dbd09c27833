/** parseDuration parses a Go duration ("1m30s", "500ms") or a number of seconds, in milliseconds. */
export function parseDuration(d: string | number | undefined): number {
  if (d === undefined) return 0;
  if (typeof d === "number") return d * 1000;
  const units: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };
  let ms = 0;
  const re = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/gy;
  const sign = d.startsWith("-") ? -1 : 1;
  const s = d.replace(/^[-+]/, "");
  if (s === "0") return 0;
  let m: RegExpExecArray | null;
  let end = 0;
  while ((m = re.exec(s)) !== null) {
    ms += Number(m[1]) * units[m[2]!]!;
    end = re.lastIndex;
  }
  if (end !== s.length || end === 0) throw new Error(`dwr: duration "${d}" is not a duration`);
  return sign * ms;
}
