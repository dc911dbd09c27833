// A fake, local chat-completions model: POST /v1/chat/completions answered
// with a canned, deterministic proposal — the refund the ticket asks for,
// never more than the order's total (the order is in a system message).
// Requests are bounded (64 KiB) before they are read.
//
//     node dist/fake-model.js [port]      (default 8799)
import { createHash } from "node:crypto";
import { createServer, type ServerResponse } from "node:http";

const MaxRequestBytes = 64 * 1024;
const port = Number(process.argv[2] ?? 8799);

type Message = { role: string; content?: string };

function reply(res: ServerResponse, status: number, body: unknown) {
  const raw = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(raw) });
  res.end(raw);
}

function answer(req: { model?: string; messages?: Message[] }) {
  const msgs = req.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw new Error("/messages: must be a non-empty array");
  const ticket = msgs.filter((m) => m.role === "user").at(-1)?.content;
  const record = msgs.find((m) => m.role === "system" && m.content?.startsWith("Order record: "))?.content;
  if (!ticket || !record) throw new Error("/messages: needs a user message (the ticket) and the order record");
  const order = JSON.parse(record.slice("Order record: ".length)) as { id: string; total: number; currency: string };
  const asked = /(\d+(?:\.\d+)?)\s*(?:EUR|€|euros?)/.exec(ticket);
  const amount = asked ? Math.min(Number(asked[1]), order.total) : order.total;
  const content = JSON.stringify({ action: "refund", order_id: order.id, amount, currency: order.currency });
  const words = (s: string) => (s.match(/\w+|[^\w\s]/g) ?? []).length;
  const prompt = JSON.stringify(msgs);
  const usage = { prompt_tokens: words(prompt), completion_tokens: words(content), total_tokens: 0 };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  return {
    id: "chatcmpl-" + createHash("sha256").update(prompt).digest("hex").slice(0, 24),
    object: "chat.completion",
    created: 0, // deterministic: the same request, the same bytes
    model: req.model ?? "fake-gpt-1",
    choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
    usage,
  };
}

createServer((req, res) => {
  if (req.method !== "POST" || req.url !== "/v1/chat/completions") return reply(res, 404, { error: { message: "no such endpoint" } });
  const n = Number(req.headers["content-length"]);
  if (!Number.isInteger(n) || n > MaxRequestBytes)
    return reply(res, 413, { error: { message: `a Content-Length of at most ${MaxRequestBytes} bytes is required` } });
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    try {
      reply(res, 200, answer(JSON.parse(Buffer.concat(chunks).toString("utf8"))));
    } catch (e) {
      reply(res, 400, { error: { message: (e as Error).message, type: "invalid_request_error" } });
    }
  });
}).listen(port, "127.0.0.1", () => console.log(`fake model listening on http://127.0.0.1:${port}/v1/chat/completions`));
