"""An agent as a dwr worker: it answers a support ticket asking for a
refund, with a (fake, local) model, a person's approval before the refund,
and a verifier that checks the result.

    PYTHONPATH=../../executors/python python3 agent.py

Environment: DWR_SERVER (default nats://127.0.0.1:4222), DWR_CREDS (an
executor's credential for the queues "agent" and "agent-checks"), MODEL_URL
(default http://127.0.0.1:8799/v1/chat/completions), OUTBOX (the file the
refunds are written to, default outbox.jsonl) and APPROVER_ROLE (who may
approve a refund, default "support-lead").

What a task on queue "agent" does, attempt after attempt:

1. The agent loop: it calls the model, records each call as a model step
   (model, prompt version, tokens) with the raw response stored as an
   artifact (the step's response_ref is its sha256), runs the tool the model
   asks for (lookup_order), and checkpoints the conversation after each step.
   It ends when the model proposes an action.
2. It asks for approval of exactly that action. The first time, the request
   parks the task: the attempt ends and no worker is held. A person decides
   (dwr approve); the service starts a new attempt, handed the checkpoint
   (the conversation and its model steps) and the decision.
3. Approved, it performs the side effect — a line in the outbox — keyed by
   the task's operation key, which is the same for every attempt: an attempt
   that runs again after a crash finds its line there and writes nothing.
4. It returns the result, with the model steps and their raw responses.

A verifier on queue "agent-checks" judges the result before the task is
accepted: the refund is the approved action, at most the order's total, and
the proposal the model's last raw response holds.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import signal
import sys
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

import dwr

PROMPT_VERSION = "refund-agent/3"
TOOL_SCHEMA_VERSION = "tools/1"
MAX_TURNS = 4  # model calls per task, at most
MAX_RESPONSE_BYTES = 256 * 1024  # a model response is read only up to this
MODEL_TIMEOUT = 20.0  # seconds

MODEL_URL = os.environ.get("MODEL_URL", "http://127.0.0.1:8799/v1/chat/completions")
OUTBOX = os.environ.get("OUTBOX", "outbox.jsonl")
APPROVER_ROLE = os.environ.get("APPROVER_ROLE", "support-lead")

# The shop's orders: what the lookup_order tool reads (a database, in life).
ORDERS: Dict[str, Dict[str, Any]] = {
    "o-7": {"id": "o-7", "customer": "ada@example.com", "total": 120.0, "currency": "EUR", "status": "delivered"},
    "o-8": {"id": "o-8", "customer": "bob@example.com", "total": 35.5, "currency": "EUR", "status": "shipped"},
}

SYSTEM_PROMPT = ("You are a support agent. Look the order up with lookup_order, then answer with one JSON object: "
                 '{"action": "refund", "order_id": ..., "amount": ..., "currency": ..., "reason": ...} '
                 'or {"action": "none", "reason": ...}. Never refund more than the order total.')
TOOLS = [{"type": "function", "function": {
    "name": "lookup_order", "description": "Reads an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]

log = logging.getLogger("agent")


def lookup_order(args: Dict[str, Any]) -> Dict[str, Any]:
    order = ORDERS.get(str(args.get("order_id")))
    return order if order is not None else {"error": "no such order"}


def _post(body: bytes) -> bytes:
    req = urllib.request.Request(MODEL_URL, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=MODEL_TIMEOUT) as r:
            raw = r.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as e:
        detail = e.read(4096).decode(errors="replace")
        if 400 <= e.code < 500 and e.code != 429:
            raise dwr.Permanent("the model refused the request (%d): %s" % (e.code, detail)) from None
        raise RuntimeError("the model answered %d: %s" % (e.code, detail)) from None  # retried
    if len(raw) > MAX_RESPONSE_BYTES:
        raise dwr.Permanent("the model's response is over %d bytes" % MAX_RESPONSE_BYTES)
    return raw


async def call_model(messages: List[Dict[str, Any]]) -> bytes:
    """One chat-completions call; its raw response bytes (a network error
    raises, and the attempt is retried)."""
    body = json.dumps({"model": "fake-gpt-1", "messages": messages, "tools": TOOLS, "temperature": 0}).encode()
    return await asyncio.to_thread(_post, body)


def parse_response(raw: bytes) -> Dict[str, Any]:
    """The response's first message, checked to be what the agent can use."""
    try:
        resp = json.loads(raw)
        msg = resp["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise dwr.Permanent("the model's response is not a chat completion: /choices/0/message is missing") from None
    if not isinstance(msg, dict):
        raise dwr.Permanent("the model's response: /choices/0/message is not an object")
    return msg


def parse_proposal(content: Any) -> Dict[str, Any]:
    try:
        p = json.loads(content)
    except (TypeError, ValueError):
        raise dwr.Permanent("the model's answer is not JSON: %.200r" % content) from None
    if not isinstance(p, dict) or p.get("action") not in ("refund", "none"):
        raise dwr.Permanent("the model's answer has no action (refund or none): %.200r" % content)
    if p["action"] == "refund":
        for field, typ in (("order_id", str), ("amount", (int, float)), ("currency", str)):
            if not isinstance(p.get(field), typ):
                raise dwr.Permanent("the model's refund has no valid /%s: %.200r" % (field, content))
    return p


def apply_refund(operation_key: str, action: Dict[str, Any]) -> bool:
    """The side effect, idempotent by the operation key: appends the refund
    to the outbox unless a line with this key is there already. Returns
    whether it wrote one."""
    fd = os.open(OUTBOX, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # one writer at a time, across processes
        f.seek(0)
        for line in f:
            if line.strip() and json.loads(line).get("operation_key") == operation_key:
                return False
        f.write(json.dumps({"operation_key": operation_key, "refund": action}, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
        return True


def already_applied(operation_key: str) -> int:
    """How many outbox lines hold operation_key."""
    try:
        with open(OUTBOX) as f:
            return sum(1 for line in f if line.strip() and json.loads(line).get("operation_key") == operation_key)
    except FileNotFoundError:
        return 0


async def agent_loop(job: dwr.Job, ticket: Dict[str, Any]) -> Dict[str, Any]:
    """Runs the model until it proposes an action; returns the state the
    checkpoint holds (the conversation, its model steps and artifacts, the
    proposal). A later attempt resumes from the checkpoint, never calling the
    model again for a step it recorded."""
    state: Dict[str, Any] = job.checkpoint if isinstance(job.checkpoint, dict) else {
        "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                     {"role": "user", "content": "Ticket %s from %s: %s" % (ticket["id"], ticket.get("customer", "?"), ticket["text"])}],
        "steps": [], "artifacts": [], "order": None}
    while "proposal" not in state:
        if len(state["steps"]) >= MAX_TURNS:
            raise dwr.Permanent("the model proposed nothing in %d calls" % MAX_TURNS)
        raw = await call_model(state["messages"])
        n = len(state["steps"]) + 1
        art = await job.put_artifact("model-response-%d.json" % n, raw, type="application/json")
        msg = parse_response(raw)
        usage = json.loads(raw).get("usage") or {}
        step = dwr.ModelStep(model=str(json.loads(raw).get("model") or "unknown"), prompt_version=PROMPT_VERSION,
                             tool_schema_version=TOOL_SCHEMA_VERSION, tokens=int(usage.get("total_tokens") or 0),
                             response_ref="sha256:" + art.sha256, validation="ok")
        state["messages"].append(msg)
        calls = msg.get("tool_calls") or []
        if calls:
            step.parsed = {"tool_calls": [c["function"]["name"] for c in calls]}
            for c in calls:
                if c.get("function", {}).get("name") != "lookup_order":
                    raise dwr.Permanent("the model asked for an unknown tool: %.100r" % c)
                order = lookup_order(json.loads(c["function"].get("arguments") or "{}"))
                state["order"] = order
                state["messages"].append({"role": "tool", "tool_call_id": c.get("id"), "content": json.dumps(order)})
        else:
            state["proposal"] = parse_proposal(msg.get("content"))
            step.parsed = state["proposal"]
        state["steps"].append(step.to_json())
        state["artifacts"].append(art.to_json())
        await job.save_checkpoint(state)  # between steps: a retry resumes here
        log.info("task %s attempt %d: model step %d recorded (response sha256:%s)", job.task_id, job.attempt, n, art.sha256)
    return state


async def handle(job: dwr.Job) -> dwr.Result:
    ticket = (job.input or {}).get("ticket") if isinstance(job.input, dict) else None
    if not isinstance(ticket, dict) or not isinstance(ticket.get("id"), str) or not isinstance(ticket.get("text"), str):
        raise dwr.Permanent("the input needs /ticket with an id and a text")
    state = await agent_loop(job, ticket)
    proposal = state["proposal"]
    steps = [dwr.ModelStep(**s) for s in state["steps"]]
    artifacts = [dwr.Artifact.of(a) for a in state["artifacts"]]
    if proposal["action"] != "refund":
        return dwr.Result({"ticket": ticket["id"], "action": "none", "reason": proposal.get("reason")},
                          artifacts=artifacts, model_steps=steps)

    # The exact action to approve: a decision on it authorizes this refund
    # and nothing else (its canonical digest).
    action = {"type": "refund", "ticket": ticket["id"], "order_id": proposal["order_id"],
              "amount": proposal["amount"], "currency": proposal["currency"]}
    d = await job.request_approval(
        action, summary="refund %s %s on %s (ticket %s)" % (action["amount"], action["currency"], action["order_id"], ticket["id"]),
        basis={"ticket": ticket, "order": state["order"], "model_reason": proposal.get("reason")},
        role=APPROVER_ROLE, expires_in=24 * 3600, on_expiry="reject")  # parks the task until someone decides
    if not d.approved:
        raise dwr.Permanent("refund %s by %s: %s" % (d.response, d.approver or "nobody", d.comment))

    wrote = apply_refund(job.operation_key, action)
    log.info("task %s attempt %d: refund %s (%s)", job.task_id, job.attempt, action, "applied" if wrote else "already applied")
    return dwr.Result({"ticket": ticket["id"], "refund": action, "operation_key": job.operation_key,
                       "approved_by": d.approver, "approval_id": d.approval_id, "action_digest": d.action_digest,
                       "applied_now": wrote},
                      artifacts=artifacts, model_steps=steps)


async def verify(c: dwr.Check) -> dwr.Verdict:
    """Checks the result against the shop's records and the model's raw
    response, not against what the agent says of itself."""
    res = c.result if isinstance(c.result, dict) else {}
    refund = res.get("refund")
    if res.get("action") == "none":
        return dwr.Verdict(dwr.PASS, evidence={"action": "none"})
    problems: List[str] = []
    evidence: Dict[str, Any] = {}
    if not isinstance(refund, dict):
        return dwr.Verdict(dwr.FAIL, evidence={"problems": ["the result has no /refund"]})
    order = ORDERS.get(str(refund.get("order_id")))
    if order is None:
        problems.append("order %r does not exist" % refund.get("order_id"))
    else:
        evidence.update(order_total=order["total"], refund=refund.get("amount"), currency=refund.get("currency"))
        if not isinstance(refund.get("amount"), (int, float)) or not 0 < refund["amount"] <= order["total"]:
            problems.append("the refund %r is not within the order's total %s" % (refund.get("amount"), order["total"]))
        if refund.get("currency") != order["currency"]:
            problems.append("the refund's currency %r is not the order's %s" % (refund.get("currency"), order["currency"]))
    if not res.get("approved_by"):
        problems.append("nobody approved the refund")
    if dwr.action_digest(refund) != res.get("action_digest"):
        problems.append("the refund is not the action approved (its digest differs)")
    evidence["approved_by"] = res.get("approved_by")
    # The model's last raw response (an artifact of the result) holds the proposal.
    responses = sorted((a for a in c.artifacts if a.name.startswith("model-response-")), key=lambda a: a.name)
    if not responses:
        problems.append("the result has no model response")
    else:
        last = responses[-1]
        evidence["model_response"] = "sha256:" + last.sha256
        try:
            proposed = parse_proposal(parse_response(await c.get_artifact(last.sha256)).get("content"))
        except dwr.Permanent as e:  # a verdict, not an error: the item would be delivered again
            problems.append("%s: %s" % (last.name, e))
        else:
            if (proposed.get("order_id"), proposed.get("amount")) != (refund.get("order_id"), refund.get("amount")):
                problems.append("the refund is not what the model proposed in %s" % last.name)
    evidence["outbox_lines"] = already_applied(str(res.get("operation_key")))
    if evidence["outbox_lines"] != 1:
        problems.append("the outbox holds %d refunds for the operation key, not 1" % evidence["outbox_lines"])
    if problems:
        evidence["problems"] = problems
        return dwr.Verdict(dwr.FAIL, evidence=evidence)
    return dwr.Verdict(dwr.PASS, evidence=evidence)


async def main() -> None:
    nc = await dwr.connect(name="python-agent")  # DWR_SERVER, DWR_CREDS
    worker = dwr.Worker(nc, executor="python-agent", version=PROMPT_VERSION, lease=30, concurrency=4)
    worker.task("agent")(handle)
    worker.verifier("agent-checks")(verify)
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, worker.stop)  # stop taking work, let running jobs finish
    log.info("agent: serving queues agent and agent-checks; model %s; outbox %s", MODEL_URL, os.path.abspath(OUTBOX))
    try:
        await worker.run()
    finally:
        await nc.drain()


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(main())
