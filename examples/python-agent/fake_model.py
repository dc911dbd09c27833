"""A fake, local chat-completions model for the agent example.

It answers POST /v1/chat/completions the way a chat-completions API does,
with canned, deterministic responses — no network, no weights:

- while the conversation has no tool result yet, it asks for the tool
  ``lookup_order`` with the order id it finds in the last user message;
- once it has a tool result (the order), it proposes the refund as a JSON
  message: the amount the customer asked for, never more than the order's
  total.

    python3 fake_model.py --port 8799

Requests are bounded (64 KiB) before they are read; a malformed one is
answered 400 with an error naming the field.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List

MAX_REQUEST_BYTES = 64 * 1024
MODEL = "fake-gpt-1"


class BadRequest(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__("%s: %s" % (field, message))
        self.field = field


def _tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: words and punctuation."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def answer(req: Dict[str, Any]) -> Dict[str, Any]:
    """The completion for a request (the decoded JSON body)."""
    msgs = req.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("/messages", "must be a non-empty array of messages")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest("/messages/%d/role" % i, "every message needs a role")
    users = [m for m in msgs if m["role"] == "user" and isinstance(m.get("content"), str)]
    if not users:
        raise BadRequest("/messages", "no user message to answer")
    ticket = users[-1]["content"]
    tools = [m for m in msgs if m["role"] == "tool"]
    if not tools:
        order = re.search(r"\bo-\d+\b", ticket)
        if order is None:
            message: Dict[str, Any] = {"role": "assistant", "content": json.dumps({"action": "none", "reason": "no order id in the ticket"})}
            finish = "stop"
        else:
            args = json.dumps({"order_id": order.group(0)})
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_" + hashlib.sha256(args.encode()).hexdigest()[:12], "type": "function",
                "function": {"name": "lookup_order", "arguments": args}}]}
            finish = "tool_calls"
    else:
        try:
            order = json.loads(tools[-1].get("content") or "")
        except ValueError:
            raise BadRequest("/messages/%d/content" % msgs.index(tools[-1]), "the tool result is not JSON") from None
        if not isinstance(order, dict) or "total" not in order:
            raise BadRequest("/messages/%d/content" % msgs.index(tools[-1]), "the tool result has no order total")
        asked = re.search(r"(\d+(?:\.\d+)?)\s*(?:EUR|€|euros?)", ticket)
        amount = min(float(asked.group(1)), float(order["total"])) if asked else float(order["total"])
        proposal = {"action": "refund", "order_id": order.get("id"), "amount": amount, "currency": order.get("currency"),
                    "reason": "customer reports the order arrived damaged"}
        message = {"role": "assistant", "content": json.dumps(proposal, sort_keys=True)}
        finish = "stop"
    prompt = json.dumps(msgs, sort_keys=True)
    completion = json.dumps(message, sort_keys=True)
    usage = {"prompt_tokens": _tokens(prompt), "completion_tokens": _tokens(completion)}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return {
        "id": "chatcmpl-" + hashlib.sha256(prompt.encode()).hexdigest()[:24],
        "object": "chat.completion",
        "created": 0,  # deterministic: the same request, the same bytes
        "model": req.get("model") or MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


class Handler(BaseHTTPRequestHandler):
    server_version = "fake-model/1"

    def _reply(self, status: int, body: Dict[str, Any]) -> None:
        raw = json.dumps(body, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str, field: str = "") -> None:
        err: Dict[str, Any] = {"message": message, "type": "invalid_request_error"}
        if field:
            err["param"] = field
        self._reply(status, {"error": err})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/v1/chat/completions":
            self._error(404, "no such endpoint: " + self.path)
            return
        try:
            n = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._error(411, "a Content-Length is required")
            return
        if n < 0 or n > MAX_REQUEST_BYTES:
            self._error(413, "the request is %d bytes; at most %d are allowed" % (n, MAX_REQUEST_BYTES))
            return
        try:
            req = json.loads(self.rfile.read(n))
            if not isinstance(req, dict):
                raise BadRequest("/", "the body must be a JSON object")
            self._reply(200, answer(req))
        except BadRequest as e:
            self._error(400, str(e), e.field)
        except ValueError as e:
            self._error(400, "the body is not JSON: %s" % e)

    def log_message(self, fmt: str, *args: Any) -> None:
        sys.stderr.write("fake-model: %s\n" % (fmt % args))


def main(argv: List[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8799)
    a = p.parse_args(argv)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print("fake model listening on http://127.0.0.1:%d/v1/chat/completions" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
