"""The executor SDK: a Worker that takes work items from dwr's queues and runs
a handler for each (see README "Executors: the protocol")."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple

from . import _nats
from ._canonical import ACTION_DIGEST_PREFIX, action_digest, canonical_json
from ._lazy_claim import TERMINAL_STATES, LazyClaim, lazy_item
from ._queue_keys import QueueKeys
from .client import HEADER_MIN_SEQ, HEADER_TRACEPARENT, HEADER_TRACESTATE, Client, encode, trace_headers, _parse_time
from .errors import (CAUSE_CANCELLED, CAUSE_LEASE_LOST, CAUSE_STOPPING, CAUSE_TIMEOUT, CONFLICT, INVALID, NOT_FOUND,
                     TOO_LARGE, AttemptEnded, DwrError, Permanent)

__all__ = [
    "Worker", "Job", "Check", "Verdict", "Result", "Artifact", "ModelStep", "Decision", "Signal", "Wait",
    "ApprovalPending", "Delegated", "DelegationPending", "DelegationFailed", "PASS", "FAIL", "INCONCLUSIVE", "CAUSE_CANCELLED", "CAUSE_LEASE_LOST", "CAUSE_TIMEOUT",
    "CAUSE_STOPPING", "MAX_PAYLOAD_BYTES", "MAX_ITEM_BYTES",
]

log = logging.getLogger("dwr.worker")

PASS = "PASS"
FAIL = "FAIL"
INCONCLUSIVE = "INCONCLUSIVE"

# MAX_PAYLOAD_BYTES bounds a result, checkpoint, action or evidence
# (executors.MaxPayloadBytes): store anything larger as an artifact.
MAX_PAYLOAD_BYTES = 256 << 10
# A work item is at most 1 MiB (the service's max message); one larger is
# handed back without being decoded.
MAX_ITEM_BYTES = 1 << 20
MIN_LEASE = 1.0
SEALED_PREFIX = b"dwr:sealed:1:"
# A pull request waits this long for work items.
FETCH_WINDOW = 15.0
# The most bytes of work items one pull brings: well under the server's
# max_pending (64 MiB by default), past which it cuts the connection as a
# slow consumer. A pull of 256 items of up to 1 MiB each passed it.
FETCH_BYTES = 8 << 20
# Failure codes of the SDK's own failures.
CODE_INVALID_RESULT = "invalid_result"
CODE_DEPENDENCIES = "dependencies"
CODE_DELEGATIONS = "delegations"
MAX_MESSAGE = 4096
# How long a refusal's reading of the views waits for them to catch up.
VIEW_LAG = 5.0
SUPERSEDE_TRIES = 3

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")


def _valid_name(s: str) -> bool:
    return 0 < len(s) <= 63 and s[0] not in "_-" and all(c in _NAME_CHARS for c in s)


def _rfc3339(t: datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _clip(s: str, n: int = MAX_MESSAGE) -> str:
    b = s.encode()
    return s if len(b) <= n else b[:n].decode("utf-8", "ignore")


@dataclass
class Artifact:
    """A reference to an artifact: what reports and verdicts carry."""

    name: str
    sha256: str
    size: int = 0
    type: str = ""

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"name": self.name, "sha256": self.sha256}
        if self.size:
            d["size"] = self.size
        if self.type:
            d["type"] = self.type
        return d

    @classmethod
    def of(cls, d: Dict[str, Any]) -> "Artifact":
        return cls(name=str(d.get("name", "")), sha256=str(d.get("sha256", "")), size=int(d.get("size") or 0),
                   type=str(d.get("type") or ""))


@dataclass
class ModelStep:
    """One consequential model call of an attempt; its tokens and cost count
    against the goal's budget."""

    model: str
    prompt_version: str = ""
    tokens: int = 0
    cost: float = 0.0
    input_ref: str = ""
    response_ref: str = ""
    tool_schema_version: str = ""
    parsed: Any = None
    validation: str = ""

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"model": self.model}
        for k in ("input_ref", "prompt_version", "tool_schema_version", "response_ref", "validation"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.parsed is not None:
            d["parsed"] = self.parsed
        if self.tokens:
            d["tokens"] = self.tokens
        if self.cost:
            d["cost"] = self.cost
        return d


@dataclass
class Result:
    """What a handler returns when it wants artifacts or model steps with
    its output (returning a plain value reports it as the output)."""

    output: Any = None
    artifacts: List[Artifact] = field(default_factory=list)
    model_steps: List[ModelStep] = field(default_factory=list)


@dataclass
class Signal:
    """The signal that resumed the task."""

    name: str
    payload: Any = None


@dataclass
class Decision:
    """A decision taken on one of the task's approvals. ``role`` is the
    approver's role; ``asked_role`` the role the job's request asked to
    decide ("" for any approver): the approval's own role, or, for an
    approval an escalation made, the role of the request it escalated."""

    approval_id: str
    action_digest: str
    action: Any
    response: str
    approver: str = ""
    comment: str = ""
    role: str = ""
    decided_at: str = ""
    asked_role: str = ""
    #: For an approval that needed several approvers (its quorum): every
    #: approver who approved it, in order, the one who made the quorum last.
    approvers: List[str] = field(default_factory=list)

    @property
    def approved(self) -> bool:
        return self.response == "approve"


@dataclass
class Delegated:
    """The outcome of a delegation whose child goal ended: its state
    (achieved, failed or cancelled), and the accepted ``result`` and
    ``artifacts`` of its tasks by plan key (``results``)."""

    key: str
    goal_id: str
    state: str
    reason: str = ""
    results: Dict[str, Dict[str, Any]] = field(default_factory=dict)

    @property
    def achieved(self) -> bool:
        return self.state == "achieved"


class DelegationFailed(Exception):
    """Job.delegate's error when the delegated goal failed or was cancelled
    (the task resumed by a review's retry, or on_failure "resume"):
    ``delegated`` says how."""

    def __init__(self, delegated: Delegated) -> None:
        self.delegated = delegated
        super().__init__("the delegated goal %s was not achieved: %s %s" % (delegated.goal_id, delegated.state, delegated.reason))


class Wait(Exception):
    """Raise it from a handler to park the task without holding a process:
    made by Job.sleep(until) or Job.await_signal(name). The attempt ends
    parked; a new attempt runs when the time or the signal comes, handed the
    last checkpoint (and Job.signal)."""

    def __init__(self, *, until: Optional[datetime] = None, signal: str = "") -> None:
        self.until = until
        self.signal = signal
        super().__init__("waiting for signal %r" % signal if signal else "sleeping until %s" % (until and _rfc3339(until)))


class ApprovalPending(Wait):
    """Job.request_approval recorded a request: let it propagate from the
    handler. The task waits for a person's decision, holding no worker."""

    def __init__(self, approval_id: str, action_digest: str) -> None:
        Exception.__init__(self, "waiting for approval %s of action %s" % (approval_id, action_digest))
        self.until, self.signal = None, ""
        self.approval_id = approval_id
        self.action_digest = action_digest


class Job:
    """One attempt of a task, as a handler runs it.

    ``input`` is the task's input (decoded JSON), ``attempt`` the attempt's
    number, ``operation_key`` the same for every attempt of the task (the
    idempotency key of its side effects), ``prior_attempts`` the attempts
    before this one (dicts as task.get answers them; in a long history the
    oldest results may be left out, ``omitted`` naming each by its JSON
    pointer, such as "/attempts/0/result"), ``checkpoint`` the last
    checkpoint saved (None before the first), ``dependencies`` the accepted
    ``result`` and ``artifacts`` of each task it depends on by plan key,
    ``signal`` the signal that resumed it, ``decisions`` the decisions taken
    on its approvals (``approval`` the latest), ``verifications`` the FAIL
    verdicts of earlier attempts, ``cancel_cause`` why the attempt ended
    once the handler's task is cancelled (CAUSE_CANCELLED, ...), and
    ``traceparent`` the W3C trace context the work item carried ("" when
    none): every command of the job carries it, and a process the handler
    starts joins the trace with it in its TRACEPARENT.

    A job may start before its attempt is claimed (the lazy claim,
    _lazy_claim.py): its first command that needs the attempt's token
    (save_checkpoint, request_approval, delegate, a Wait) claims it first."""

    def __init__(self, d: "_Delivery", task: Dict[str, Any], attempt: Dict[str, Any]) -> None:
        spec = task.get("spec") or {}
        self._d = d
        self.traceparent: str = d.traceparent if d is not None else ""
        self.task_id: str = task.get("id", "")
        self.workspace: str = task.get("workspace", "")
        self.queue: str = spec.get("queue", "")
        self.goal_id: str = task.get("goal_id", "")
        self.key: str = task.get("key", "")
        self.title: str = spec.get("title", "")
        self.attempt: int = int(attempt.get("n", 0))
        self.operation_key: str = attempt.get("operation_key", "")
        self.input: Any = spec.get("input")
        self.checkpoint: Any = task.get("checkpoint")
        self.prior_attempts: List[Dict[str, Any]] = [a for a in task.get("attempts") or [] if a.get("n", 0) < self.attempt]
        self.omitted: List[str] = list(task.get("omitted") or [])
        self.verifications: List[Dict[str, Any]] = [v for v in task.get("verifications") or [] if v.get("outcome") == FAIL]
        sig = task.get("signal")
        self.signal: Optional[Signal] = Signal(sig.get("name", ""), sig.get("payload")) if isinstance(sig, dict) else None
        self.decisions: List[Decision] = _decisions_of(task)
        # The role of the task's approval settings, which the service gives a
        # request that names none ("" when the task has none).
        self._approval_role: str = (spec.get("approval") or {}).get("role", "") or ""
        self.dependencies: Dict[str, Dict[str, Any]] = {}
        self.delegations: List[Delegated] = []
        self.deadline: Optional[datetime] = None
        self.cancel_cause: Optional[str] = None
        self.model_steps: List[ModelStep] = []
        self._checkpoints = 0
        self._ckpt_lock = asyncio.Lock()

    @property
    def approval(self) -> Optional[Decision]:
        """The latest decision on the task's approvals, or None."""
        return self.decisions[-1] if self.decisions else None

    async def save_checkpoint(self, data: Any) -> None:
        """Saves data (JSON) as the attempt's checkpoint: a later attempt is
        handed the last one saved. It raises AttemptEnded when the attempt no
        longer holds the task (the handler is cancelled too)."""
        raw = encode(data)
        if len(raw) > MAX_PAYLOAD_BYTES:
            raise ValueError("the checkpoint is %d bytes; at most %d are allowed" % (len(raw), MAX_PAYLOAD_BYTES))
        async with self._ckpt_lock:
            self._checkpoints += 1
            cid = "checkpoint.%s.%d.%d" % (self.task_id, self.attempt, self._checkpoints)
            token = await self._d.attempt_token()  # claims it first when the job has not
            try:
                await self._d.command("task.checkpoint", {"task_id": self.task_id, "attempt": self.attempt,
                                                          "token": token, "checkpoint": data}, cid)
            except DwrError as e:
                if e.code in (CONFLICT, NOT_FOUND) or e.field == "/token":
                    raise await self._d.fenced(e) from None
                raise

    def record_model_step(self, model: str, *, prompt_version: str = "", tokens: int = 0, cost: float = 0.0,
                          input_ref: str = "", response_ref: str = "", tool_schema_version: str = "",
                          parsed: Any = None, validation: str = "") -> ModelStep:
        """Records a consequential model call of the attempt: reported with
        its success or failure (it counts against the goal's budget)."""
        step = ModelStep(model=model, prompt_version=prompt_version, tokens=tokens, cost=cost, input_ref=input_ref,
                         response_ref=response_ref, tool_schema_version=tool_schema_version, parsed=parsed,
                         validation=validation)
        self.model_steps.append(step)
        return step

    async def put_artifact(self, name: str, data: Any, *, type: str = "") -> Artifact:
        """Stores data (bytes or a binary file object) as an artifact made
        by this task and returns its reference: attach it to the result with
        Result(artifacts=[...])."""
        import mimetypes

        typ = type or (mimetypes.guess_type(name)[0] or "")
        info = await self._d.w.client.put_artifact(data, name=name, type=typ, task_id=self.task_id,
                                                   traceparent=self._d.traceparent, tracestate=self._d.tracestate)
        return Artifact(name=info.get("name") or info["sha256"], sha256=info["sha256"], size=int(info.get("size") or 0),
                        type=info.get("type") or "")

    async def get_artifact(self, sha256: str) -> bytes:
        """Reads an artifact of the workspace (a dependency's, say), checked
        against its digest."""
        return await self._d.w.client.get_artifact(sha256, traceparent=self._d.traceparent,
                                                   tracestate=self._d.tracestate)

    def sleep(self, until: datetime | float) -> Wait:
        """A Wait that parks the task until until (a datetime, or seconds
        since the epoch): ``raise job.sleep(t)``."""
        if not isinstance(until, datetime):
            until = datetime.fromtimestamp(float(until), timezone.utc)
        return Wait(until=until)

    def await_signal(self, name: str) -> Wait:
        """A Wait that parks the task until the signal name comes:
        ``raise job.await_signal("go")``."""
        return Wait(signal=name)

    async def delegate(self, key: str, *, title: str = "", tasks: Optional[List[Dict[str, Any]]] = None,
                       description: str = "", success_criteria: Optional[List[str]] = None,
                       envelope: Optional[Dict[str, Any]] = None, ritual: str = "", ritual_version: int = 0,
                       params: Any = None, on_failure: str = "",
                       labels: Optional[Dict[str, str]] = None) -> Delegated:
        """Hands work on to a child goal (title and tasks, or the goal the
        ritual renders) that the service tracks for this task. When the task
        holds the outcome of the delegation key (a resumed attempt), it
        returns it — raising DelegationFailed when the goal was not
        achieved. Otherwise it records the delegation (task.delegate) and
        raises DelegationPending: let it propagate. on_failure: "fail" (the
        default), "review" or "resume"; labels, the child goal's (over
        those of a ritual's goal template)."""
        if not _DELEGATION_KEY.match(key):
            raise ValueError("delegation key %r is not valid: letters, digits, '_', '.' and '-', at most 128" % key)
        for d in self.delegations:
            if d.key == key:
                if d.achieved:
                    return d
                raise DelegationFailed(d)
        body: Dict[str, Any] = {"task_id": self.task_id, "attempt": self.attempt, "key": key}
        if on_failure:
            body["on_failure"] = on_failure
        if ritual:
            if title or tasks is not None:
                raise ValueError("give the child goal (title, tasks) or a ritual, not both")
            r: Dict[str, Any] = {"name": ritual}
            if ritual_version:
                r["version"] = ritual_version
            if params is not None:
                r["params"] = params
            if labels:
                r["labels"] = labels
            body["ritual"] = r
        else:
            g: Dict[str, Any] = {"title": title, "tasks": tasks or []}
            for k, v in (("description", description), ("success_criteria", success_criteria), ("envelope", envelope),
                         ("labels", labels)):
                if v:
                    g[k] = v
            body["goal"] = g
        body["token"] = await self._d.attempt_token()  # claims it first when the job has not
        try:
            r2 = await self._d.command("task.delegate", body, "delegate.%s.%d.%s" % (self.task_id, self.attempt, key))
        except DwrError as e:
            if e.code in (CONFLICT, NOT_FOUND) and e.field in ("/attempt", "/task_id") or e.field == "/token":
                raise await self._d.fenced(e) from None
            if e.code in ("unavailable", "internal"):
                raise
            raise Permanent("the service refused the delegation: " + e.message, e.code) from None
        raise DelegationPending(key, (r2 or {}).get("goal_id", "") if isinstance(r2, dict) else "")

    async def request_approval(self, action: Any, *, summary: str = "", basis: Any = None, role: str = "",
                               responses: Optional[List[str]] = None, branches: Optional[Dict[str, str]] = None,
                               on_expiry: str = "", escalate_to: str = "",
                               expires_in: Optional[float] = None, quorum: int = 0,
                               exclude_requester: bool = False) -> Decision:
        """Asks a person to approve action before the job performs it. When
        the task holds a decision on exactly this action asked of this role
        (the latest one whose action digest is the action's canonical digest
        and whose ``asked_role`` is role, or the task's approval role when
        role is empty), it returns it: perform the action on ``approve``
        only. A decision asked of one role never stands for another's: a job
        that needs two sign-offs on the same action asks each role in turn,
        and the second request, finding no decision of its role, is a new
        approval. Otherwise it records the request (task.request_approval)
        and raises ApprovalPending: let it propagate; a new attempt runs once
        someone decides, and its request_approval of the same action and
        role returns the decision. ``quorum`` asks that many distinct
        approvers of the role to approve (four eyes within one role; at most
        10): the decision comes once the last of them approves (its
        ``approvers`` names them all), or at once on another response.
        ``exclude_requester`` keeps the identity that created the task from
        approving (separation of duties); the task's approval settings may
        already ask it, and a request cannot lift it."""
        raw = canonical_json(encode(action) if action is not None else b"null")
        if action is None:
            raise ValueError("the action is required: the concrete action to approve")
        if len(raw) > MAX_PAYLOAD_BYTES:
            raise ValueError("the action is %d bytes; at most %d are allowed" % (len(raw), MAX_PAYLOAD_BYTES))
        digest = action_digest(raw)
        want = role or self._approval_role
        for d in reversed(self.decisions):
            if d.action_digest == digest and d.asked_role == want:
                return d
        body: Dict[str, Any] = {"task_id": self.task_id, "attempt": self.attempt, "action": json.loads(raw)}
        if basis is not None:
            b = encode(basis)
            if len(b) > MAX_PAYLOAD_BYTES:
                raise ValueError("the basis is %d bytes; at most %d are allowed" % (len(b), MAX_PAYLOAD_BYTES))
            body["basis"] = basis
        for k, v in (("summary", summary), ("role", role), ("responses", responses), ("branches", branches),
                     ("on_expiry", on_expiry), ("escalate_to", escalate_to), ("quorum", quorum),
                     ("exclude_requester", exclude_requester)):
            if v:
                body[k] = v
        if expires_in:
            body["expires_in"] = "%dms" % int(expires_in * 1000)
        cid = "approval.%s.%d.%s" % (self.task_id, self.attempt, digest[len(ACTION_DIGEST_PREFIX):])
        body["token"] = await self._d.attempt_token()  # claims it first when the job has not
        try:
            r = await self._d.command("task.request_approval", body, cid)
        except DwrError as e:
            if e.code in (CONFLICT, NOT_FOUND) or e.field == "/token":
                raise await self._d.fenced(e) from None
            if e.code in (INVALID, TOO_LARGE):
                raise Permanent("the service refused the approval request: " + e.message, e.code) from None
            raise
        approval_id = (r or {}).get("approval_id", "") if isinstance(r, dict) else ""
        raise ApprovalPending(approval_id, digest)


class DelegationPending(Wait):
    """Job.delegate recorded a delegation: let it propagate from the
    handler. The task waits for the child goal, holding no worker; a new
    attempt runs once it ends, and its delegate with the same key returns
    the outcome."""

    def __init__(self, key: str, goal_id: str) -> None:
        Exception.__init__(self, "waiting for goal %s, delegated as %r" % (goal_id, key))
        self.until, self.signal = None, ""
        self.key = key
        self.goal_id = goal_id


_DELEGATION_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def _attempt_count(task: Dict[str, Any]) -> int:
    """How many attempts task has had: its listed ones and those it tallies
    (earlier_attempts; a task lists its latest 100)."""
    return int((task.get("earlier_attempts") or {}).get("count", 0)) + len(task.get("attempts") or [])


def _decisions_of(task: Dict[str, Any]) -> List[Decision]:
    """The decisions taken on the task's approvals, and their expiries
    (response "expired"), in the order the approvals were requested, each
    with the role its request asked (the approval's asked_role). An approval
    without escalated_from asked its own role: so does every one of a service
    that does not record them, where an escalation's decision counts for the
    role escalated to only (the job asking the first role gets the decision
    that escalated: not an approval)."""
    out = []
    for a in task.get("approvals") or []:
        asked = (a.get("asked_role") if a.get("escalated_from") else a.get("role")) or ""
        d = a.get("decision")
        if isinstance(d, dict):
            signed = [s.get("approver", "") for s in a.get("sign_offs") or []] if d.get("response") == "approve" else []
            out.append(Decision(approval_id=a.get("id", ""), action_digest=a.get("action_digest", ""),
                                action=a.get("action"), response=d.get("response", ""), approver=d.get("approver", ""),
                                comment=d.get("comment", ""), role=d.get("role", ""), decided_at=d.get("decided_at", ""),
                                asked_role=asked, approvers=signed + [d.get("approver", "")] if signed else []))
        elif a.get("state") == "expired" and a.get("expires_at"):
            out.append(Decision(approval_id=a.get("id", ""), action_digest=a.get("action_digest", ""),
                                action=a.get("action"), response="expired", decided_at=a["expires_at"], asked_role=asked))
    return out


@dataclass
class Check:
    """A result to judge: what a verifier receives."""

    task_id: str
    workspace: str
    queue: str
    goal_id: str
    key: str
    title: str
    attempt: int
    input: Any
    result: Any
    artifacts: List[Artifact]
    result_digest: str
    prior_attempts: List[Dict[str, Any]]
    verifications: List[Dict[str, Any]]
    _client: Optional[Client] = field(default=None, repr=False)

    async def get_artifact(self, sha256: str) -> bytes:
        assert self._client is not None
        return await self._client.get_artifact(sha256)

    async def put_artifact(self, name: str, data: Any, *, type: str = "") -> Artifact:
        assert self._client is not None
        info = await self._client.put_artifact(data, name=name, type=type, task_id=self.task_id)
        return Artifact(name=info.get("name") or info["sha256"], sha256=info["sha256"], size=int(info.get("size") or 0),
                        type=info.get("type") or "")


@dataclass
class Verdict:
    """A verifier's judgment: PASS, FAIL or INCONCLUSIVE, with evidence."""

    outcome: str
    evidence: Any = None
    evidence_refs: List[Artifact] = field(default_factory=list)


Handler = Callable[[Job], Awaitable[Any]]
VerifyHandler = Callable[[Check], Awaitable[Verdict]]


# The task events that end a job's attempt (README protocol step 8).
ENDING_EVENTS = ("cancelled", "failed", "rejected", "attempt_abandoned", "attempt_failed")


def _running(t: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The attempt that holds the task now, or None."""
    if t.get("state") != "running":
        return None
    attempts = t.get("attempts") or []
    if attempts and attempts[-1].get("state") == "running":
        return attempts[-1]
    return None


def _running_from_item(t: Dict[str, Any], item_attempt: int) -> Optional[Dict[str, Any]]:
    """The running attempt when it was started from the work item whose
    first claim starts attempt item_attempt (executors' runningFromItem)."""
    r = _running(t)
    if r is None or r.get("n", 0) < item_attempt:
        return None
    for a in t.get("attempts") or []:
        if item_attempt <= a.get("n", 0) < r["n"] and a.get("state") != "abandoned":
            return None
    return r


def _ack_meta(reply: str) -> tuple[int, float]:
    """The delivery count and the stream timestamp (seconds since the
    epoch) of a JetStream message, from its $JS.ACK reply subject (both
    token layouts: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.
    <consumer seq>.<ts nanos>.<pending>, and the one with a domain and an
    account hash first). A subject it cannot read gives (1, 0.0): the item
    then counts as a first delivery, long published (claimed first)."""
    t = reply.split(".")
    try:
        if len(t) == 9:
            return int(t[4]), int(t[7]) / 1e9
        if len(t) >= 11:
            return int(t[6]), int(t[9]) / 1e9
    except ValueError:
        pass
    return 1, 0.0


def _item_trace(headers: Optional[Dict[str, str]]) -> tuple[str, str]:
    """The trace a work item's message carries (traceparent, tracestate),
    or ("", "") when none or not a valid one."""
    tp = ts = ""
    for k, v in (headers or {}).items():
        if k.lower() == HEADER_TRACEPARENT:
            tp = v
        elif k.lower() == HEADER_TRACESTATE:
            ts = v
    h = trace_headers(tp, ts)
    return h.get(HEADER_TRACEPARENT, ""), h.get(HEADER_TRACESTATE, "")


class _Delivery(LazyClaim):
    """One work item delivered to the worker, from its receipt to its
    acknowledgement. Its job claims its attempt first, or lazily
    (_lazy_claim.py) — or, for an attempt a report was handed (msg None:
    the handoff, run_handed), holds it claimed from the start."""

    def __init__(self, w: "Worker", msg: Optional[_nats.Msg], queue: str, lease: float, kind: str, fn: Any,
                 trace: Tuple[str, str] = ("", "")) -> None:
        self.w = w
        self.msg = msg  # None for a handed attempt: there is no item to settle
        self.queue = queue
        self.lease = lease
        self.kind = kind
        self.fn = fn
        self.item: Dict[str, Any] = {}
        # The item holds sealed payloads it could not open itself (read
        # opened from the service). Not LazyClaim's ``sealed``, which says
        # the report carries the claim.
        self.encrypted = False
        if msg is not None:
            self.delivered, self.published = _ack_meta(msg.reply)
            # Every command of the job carries the trace of its item.
            self.traceparent, self.tracestate = _item_trace(msg.headers)
        else:
            # A handed attempt's job stays in the trace of the job whose
            # report was handed it.
            self.delivered, self.published = 0, 0.0
            self.traceparent, self.tracestate = trace
        self._init_claim()
        # The attempt the job's report was handed, if any (run_handed).
        self.next: Optional[Dict[str, Any]] = None
        self.beat: Optional[Dict[str, Any]] = None
        self.beating = asyncio.Lock()
        self.job: Optional[Job] = None
        self.handler: Optional["asyncio.Task[Any]"] = None
        self.ended: Optional[str] = None  # the task ended (a terminal event was seen)
        self.lost: Dict[int, str] = {}  # attempts ended by the service, and why

    # -- the item -----------------------------------------------------------

    async def _settle(self, verb: bytes) -> None:
        if self.msg is None:
            return  # a handed attempt has no item
        if self.msg.reply:
            try:
                await self.w.nc.publish(self.msg.reply, verb)
            except _nats.NatsError as e:
                log.warning("dwr: could not settle the work item of task %s: %s", self.item.get("task_id"), e)

    async def ack(self) -> None:
        await self._settle(b"+ACK")

    async def nak(self, delay: Optional[float] = None) -> None:
        if delay:
            await self._settle(b"-NAK " + json.dumps({"delay": int(delay * 1e9)}).encode())
        else:
            await self._settle(b"-NAK")

    async def command(self, name: str, body: Any, command_id: str) -> Any:
        """A command of this delivery, retried with the same id until
        answered (or the worker stops hard), in the item's trace."""
        return await self.w.client.command(name, body, command_id=command_id, retry_for=None,
                                           traceparent=self.traceparent, tracestate=self.tracestate)

    async def get_task(self, task_id: str, min_seq: int = 0) -> Dict[str, Any]:
        """task.get, from views that reflect at least min_seq (a work item's
        ``seq``: items leave before the views apply their record)."""
        headers = {HEADER_MIN_SEQ: str(min_seq)} if min_seq else None
        return await self.w.client.query("task.get", {"id": task_id}, headers=headers, retry_for=None,
                                         traceparent=self.traceparent, tracestate=self.tracestate)

    async def task_after(self, ok: Callable[[Dict[str, Any]], bool], task_id: str = "") -> Optional[Dict[str, Any]]:
        """The task from the views once ok holds for it, waiting up to
        VIEW_LAG for them to catch up with a refusal; None past it."""
        deadline = time.monotonic() + VIEW_LAG
        while True:
            t = await self.get_task(task_id or self.item["task_id"])
            if ok(t):
                return t
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)

    # -- running ------------------------------------------------------------

    async def run(self) -> None:
        assert self.msg is not None, "a handed attempt runs with run_handed"
        data = self.msg.data
        if len(data) > MAX_ITEM_BYTES:
            log.error("dwr: a work item of %d bytes on queue %s: larger than any; handing it back", len(data), self.queue)
            await self.nak(self.lease)
            return
        try:
            item = self._item_of(data)
        except ValueError as e:
            log.error("dwr: a work item this worker cannot run (%s); handing it back", e)
            await self.nak(self.lease)
            return
        self.item = item
        sealed = SEALED_PREFIX in data
        if sealed:
            # Sealed with the queue's key (a verification queue's too): opened
            # here (_queue_keys.py).
            plain = await self.w._queue_keys_of(self.queue).open_item(data)
            if plain is not None:
                try:
                    item, sealed = self._item_of(plain), False
                    self.item = item
                except ValueError:
                    pass
        self.encrypted = sealed
        if sealed:
            # Other sealed payloads are read opened from the service: an
            # execute item then runs from the task as task.get answers it
            # (or, when the views do not show it ready for the item's
            # attempt yet, from its claim's), a verify item judges the
            # task's as task.get answers it.
            item["task"], item["dependencies"] = None, None
        if sealed and self.kind == "execute" and self.delivered == 1:
            # Read at least the record that dispatched the item, so that the
            # task is seen ready for it (and the job may start lazily).
            seq = item.get("seq")
            try:
                t = await self.get_task(item["task_id"], seq if isinstance(seq, int) and seq > 0 else 0)
            except DwrError:
                t = None
            if isinstance(t, dict) and t.get("state") == "ready" and _attempt_count(t) + 1 == item["attempt"]:
                item["task"] = t
        # The lease is renewed from receipt until the item is settled, and
        # the task's events are watched from before the claim, so that none
        # that ends the attempt is missed.
        hb = asyncio.get_running_loop().create_task(self._heartbeat())
        self.w._watch(item["task_id"], self)
        try:
            if self.kind == "verify":
                await self._judge()
            elif lazy_item(item, self.delivered, self.published):
                # The job runs on the item's task, and claims lazily.
                self.lazy = True
                await self._execute(item["task"], {"n": item["attempt"], "operation_key": item.get("operation_key", "")})
            else:
                claimed = await self._claim()
                if claimed is not None:
                    await self._execute(*claimed)
        finally:
            hb.cancel()
            self.w._unwatch(item["task_id"], self)

    def _item_of(self, data: bytes) -> Dict[str, Any]:
        """The work item data holds, if this delivery can run it; ValueError
        saying why not otherwise."""
        return self._check_item(json.loads(data))

    def _check_item(self, item: Any) -> Dict[str, Any]:
        """item, if this delivery can run it (a work item of its kind, for
        its queue); ValueError saying why not otherwise."""
        if not isinstance(item, dict):
            raise ValueError("not an object")
        want = "verify" if self.kind == "verify" else "execute"
        if item.get("kind") != want:
            raise ValueError("kind %r, not %r" % (item.get("kind"), want))
        if item.get("queue") != self.queue or item.get("workspace") != self.w.workspace:
            raise ValueError("of queue %s/%s, not %s/%s" % (item.get("workspace"), item.get("queue"),
                                                            self.w.workspace, self.queue))
        if not isinstance(item.get("task_id"), str) or not isinstance(item.get("attempt"), int):
            raise ValueError("task_id or attempt missing")
        return item

    # -- the handoff --------------------------------------------------------
    #
    # A report asks for it (``next: true``) unless the worker is configured
    # not to (no_handoff), judges verifications, ran an item it could not
    # open, or stops; the service then may start, in the report's commit,
    # the attempt of a task the report left ready on this queue, and hand it
    # in the reply (``result.next``): its token and its work item. The worker
    # runs it at once, in the slot the reported job had, as if it had
    # claimed it — no work item, so nothing to acknowledge or renew: the
    # attempt's heartbeats keep its lease, and the service abandons it if
    # they stop. Its own report may be handed the next one, and so on down a
    # chain (Worker._deliver). As the Go SDK does (executors/handoff.go).

    def ask_next(self) -> bool:
        """Whether the job's report asks for the handoff. Not while the
        worker stops: a handed attempt nobody runs waits out its lease
        before its task is ready again. (The handed item comes opened, as a
        claim's task does, so a worker that could not open its queue's
        sealed items asks too.)"""
        return not self.w.no_handoff and self.kind != "verify" and not self.w._stopping

    def _handed(self, r: Any) -> None:
        """Keeps the attempt a recorded report's reply (its result r) was
        handed, if any: only a handoff with its token and its work item is
        one (without them the attempt was taken from the sender, or never
        started)."""
        h = r.get("next") if isinstance(r, dict) else None
        if isinstance(h, dict) and h.get("token") and isinstance(h.get("item"), dict):
            self.next = h

    def handoff(self) -> "_Delivery":
        """A delivery for the attempt this one's report was handed (next):
        on the same queue, in the same trace."""
        return _Delivery(self.w, None, self.queue, self.lease, self.kind, self.fn,
                         trace=(self.traceparent, self.tracestate))

    async def run_handed(self, h: Dict[str, Any]) -> None:
        """Runs handed attempt h: the job, its heartbeats, its report (which
        may be handed the next attempt: self.next). The attempt is claimed
        already, with h's token; the job runs on the task h's item carries,
        running that attempt."""
        item, t, a = h.get("item"), None, None
        try:
            item = self._check_item(item)
            t = item.get("task")
            if (isinstance(t, dict) and item["task_id"] == h.get("task_id") == t.get("id")
                    and item["attempt"] == h.get("attempt")):
                a = next((x for x in t.get("attempts") or [] if x.get("n") == item["attempt"]), None)
            if a is None or a.get("state") != "running":
                raise ValueError("it carries no task running attempt %s" % h.get("attempt"))
        except ValueError as e:
            # Not for this worker to run (a service of another version?):
            # the attempt's lease lapses, and the task goes back to the queue.
            log.error("dwr: task %s attempt %s: a handed attempt this worker cannot run (%s); it returns to the queue "
                      "when its lease lapses", h.get("task_id"), h.get("attempt"), e)
            return
        assert isinstance(t, dict) and a is not None
        self.item = item
        self.token = h["token"]
        self.beat = {"task_id": item["task_id"], "attempt": item["attempt"], "token": self.token}
        hb = asyncio.get_running_loop().create_task(self._heartbeat())
        self.w._watch(item["task_id"], self)
        try:
            await self._execute(t, a)
        finally:
            hb.cancel()
            self.w._unwatch(item["task_id"], self)

    async def _heartbeat(self) -> None:
        """Renews the item's lease every lease/3 (+WPI) and, at each renewal,
        claims a lazy job's attempt (at the first) and, once claimed, tells
        the service the attempt is alive (task.heartbeat). The claim and the
        heartbeat run beside the renewals, never holding them up: a tick
        whose claim or heartbeat is still in flight sends no other. A
        handed attempt has no item: only its heartbeats keep its lease."""
        every = self.lease / 3
        beat: Optional["asyncio.Task[None]"] = None
        try:
            while True:
                await asyncio.sleep(every)
                if self.w._pause_heartbeats:
                    continue
                await self._settle(b"+WPI")
                if beat is None or beat.done():
                    beat = asyncio.get_running_loop().create_task(self._beat(every))
        finally:
            if beat is not None and not beat.done():
                beat.cancel()

    async def _beat(self, every: float) -> None:
        """One heartbeat: the lazy claim when it is due, then task.heartbeat
        of the claimed attempt, each bounded by the heartbeat interval."""
        await self.claim_at_heartbeat(every)
        async with self.beating:
            if self.beat is not None:
                try:
                    await self.w.client.command("task.heartbeat", self.beat, command_id="", retry=False,
                                                timeout=min(every, 5.0), traceparent=self.traceparent,
                                                tracestate=self.tracestate)
                except DwrError as e:
                    log.debug("dwr: heartbeat of task %s: %s", self.beat.get("task_id"), e)

    async def _retire_beat(self) -> None:
        async with self.beating:
            self.beat = None

    async def _claim(self) -> Optional[tuple]:
        """Claims the attempt first and returns the task and attempt to run,
        or None (the item settled or left) when no job is to run."""
        it = self.item
        # The reply carries the task when the item did not, or when the
        # claim supersedes an attempt (the item's task is stale then).
        body, cid = self.claim_request(it.get("task") is not None)
        try:
            r = await self.command("task.claim", body, cid)
        except DwrError as e:
            r = None
            err = e
            if e.code == CONFLICT and self.delivered > 1:
                r, err = await self._supersede(body, cid, e)
                if r is None and err is None:
                    return None
            if r is None:
                assert err is not None
                if err.code in (CONFLICT, NOT_FOUND):
                    await self.ack()  # the task is no longer ready: the item is stale
                    log.info("dwr: task %s: skipped: %s", it["task_id"], err.message)
                else:
                    log.error("dwr: task %s: claim refused: %s", it["task_id"], err)
                    await self.nak(self.lease)
                return None
        t = r.get("task") if isinstance(r, dict) else None
        n = r.get("attempt", 0)
        a: Optional[Dict[str, Any]] = None
        if t is not None:
            a = next((x for x in t.get("attempts") or [] if x.get("n") == n), None)
        elif it.get("task") is not None and r.get("token_hash") and n == len(it["task"].get("attempts") or []) + 1:
            t = it["task"]
            a = {"n": n, "executor": self.w.executor, "operation_key": it.get("operation_key", ""), "state": "running"}
        else:
            t = await self.get_task(it["task_id"])
            a = next((x for x in t.get("attempts") or [] if x.get("n") == n), None)
        if r.get("state") != "running" or a is None or a.get("state") != "running" or a.get("executor") != self.w.executor:
            await self.ack()
            log.info("dwr: task %s: the claim started no attempt; task is %s", it["task_id"], r.get("state"))
            return None
        if not r.get("token"):
            log.error("dwr: task %s: the claim's reply carries no token; the item is left to be redelivered", it["task_id"])
            return None
        self.token = r["token"]
        self.beat = {"task_id": it["task_id"], "attempt": n, "token": self.token}
        return t, a

    async def _supersede(self, body: Dict[str, Any], cid: str, first: DwrError) -> tuple:
        """Claims a redelivered item again, superseding the attempt an
        earlier delivery of it started and lost the lease of. It returns
        (reply, None), (None, the refusal), or (None, None) when the item
        was settled or left."""
        it = self.item
        t = await self.task_after(lambda t: t.get("state") != "ready")
        if t is None:
            return None, None  # the views lag: redelivered after the lease
        a = _running_from_item(t, it["attempt"])
        if a is None:
            return None, first
        body = dict(body, supersedes=a["n"])
        for tries in range(1, SUPERSEDE_TRIES + 1):
            try:
                return await self.command("task.claim", body, "%s.s%d" % (cid, a["n"])), None
            except DwrError as e:
                if e.code != CONFLICT:
                    return None, e
                wait = None
                if e.retry_after:
                    try:
                        wait = _parse_time(e.retry_after) - time.time() + 0.01
                    except ValueError:
                        wait = None
                if wait is not None and wait <= self.lease + 5 and tries < SUPERSEDE_TRIES:
                    await asyncio.sleep(max(wait, 0))
                    continue
                await self.nak(self.lease)
                log.info("dwr: task %s: supersede refused: %s", it["task_id"], e.message)
                return None, None
        return None, None

    def end(self, cause: str) -> None:
        """The task ended: the job is cancelled."""
        self.ended = self.ended or cause
        self._cancel(cause)

    def end_attempt(self, n: int, cause: str) -> None:
        self.lost.setdefault(n, cause)
        if self.job is not None and self.job.attempt == n:
            self._cancel(cause)

    def _cancel(self, cause: str) -> None:
        if self.job is None or self.handler is None or self.handler.done():
            return
        if self.job.cancel_cause is None:
            self.job.cancel_cause = cause
        self.handler.cancel()

    async def fenced(self, e: DwrError) -> AttemptEnded:
        """Why the service refused a command of the job's attempt as not
        holding the task: cancelled when the task ended, else lease_lost."""
        cause = CAUSE_LEASE_LOST
        if self.ended:
            cause = CAUSE_CANCELLED
        else:
            n = self.job.attempt if self.job else 0
            try:
                t = await self.task_after(lambda t: (_running(t) or {}).get("n") != n)
            except DwrError:
                t = None
            if t is not None and t.get("state") in TERMINAL_STATES:
                cause = CAUSE_CANCELLED
        if self.job is not None and self.job.cancel_cause is None:
            self.job.cancel_cause = cause
        return AttemptEnded(cause, "the attempt ended (%s): %s" % (cause, e.message))

    async def _dependencies(self, t: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
        ids = t.get("depends_on") or []
        if not ids:
            return {}
        deps = self.item.get("dependencies") or []
        if self.item.get("task") is not t or len(deps) != len(ids):
            deps = []
            for tid in ids:
                d = await self.task_after(lambda x: x.get("state") == "accepted", tid)
                if d is None:
                    raise DwrError(CONFLICT, "dependency %s is not accepted" % tid)
                last = next((a for a in reversed(d.get("attempts") or []) if a.get("state") == "succeeded"), {})
                deps.append({"key": d.get("key", ""), "task_id": tid, "result": last.get("result"),
                             "artifacts": last.get("artifacts") or []})
        return {(d.get("key") or d.get("task_id")): d for d in deps}

    async def _delegations(self, t: Dict[str, Any]) -> List[Delegated]:
        """The outcomes of the task's delegations whose child goal ended,
        with the accepted results of the child plan's tasks."""
        out = []
        for d in t.get("delegations") or []:
            if d.get("state") == "open":
                continue
            dd = Delegated(key=d.get("key", ""), goal_id=d.get("goal_id", ""), state=d.get("state", ""),
                           reason=d.get("reason", ""))
            for pt in d.get("tasks") or []:
                ct = await self.get_task(pt["task_id"])
                if ct.get("state") == "accepted":
                    last = next((x for x in reversed(ct.get("attempts") or []) if x.get("state") == "succeeded"), {})
                    dd.results[pt.get("key", "")] = {"key": pt.get("key", ""), "task_id": pt["task_id"],
                                                     "result": last.get("result"), "artifacts": last.get("artifacts") or []}
            out.append(dd)
        return out

    async def _execute(self, t: Dict[str, Any], a: Dict[str, Any]) -> None:
        """Runs the handler for the attempt (claimed, or to be claimed
        lazily) and reports what it returned."""
        job = Job(self, t, a)
        self.job = job
        loop = asyncio.get_running_loop()
        try:
            job.dependencies = await self._dependencies(t)
        except DwrError as e:
            await self._report(job, failure=(CODE_DEPENDENCIES, _clip("the results of the task's dependencies could not be read: " + e.message), True))
            return
        try:
            job.delegations = await self._delegations(t)
        except DwrError as e:
            await self._report(job, failure=(CODE_DELEGATIONS, _clip("the results of the task's delegations could not be read: " + e.message), True))
            return
        timeout = _duration_seconds((t.get("spec") or {}).get("timeout"))
        if a.get("deadline"):
            try:
                job.deadline = datetime.fromtimestamp(_parse_time(a["deadline"]), timezone.utc)
            except ValueError:
                pass
        elif timeout:
            job.deadline = datetime.now(timezone.utc) + timedelta(seconds=timeout)
        self.handler = loop.create_task(self.fn(job))
        timer = None
        if job.deadline is not None:
            timer = loop.call_later(max(job.deadline.timestamp() - time.time(), 0), self._cancel, CAUSE_TIMEOUT)
        if self.ended:
            self._cancel(self.ended)
        elif job.attempt in self.lost:
            self._cancel(self.lost[job.attempt])
        elif self.lazy_refused is not None:
            self._cancel(self.lazy_refused[0])
        try:
            await asyncio.wait({self.handler})
        except asyncio.CancelledError:
            # The worker stops hard: the job is cancelled and not reported;
            # its item is redelivered after the lease.
            if job.cancel_cause is None:
                job.cancel_cause = CAUSE_STOPPING
            self.handler.cancel()
            await asyncio.wait({self.handler}, timeout=1.0)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        self.job_ended = True  # its heartbeats claim no more
        await self._retire_beat()
        h = self.handler
        steps = list(job.model_steps)
        if h.cancelled():
            cause = job.cancel_cause or CAUSE_CANCELLED
            await self._report(job, failure=(cause, "the attempt ended: " + cause, True), steps=steps)
            return
        exc = h.exception()
        if exc is None:
            res = h.result()
            if isinstance(res, Result):
                await self._report(job, output=res.output, artifacts=res.artifacts, steps=steps + list(res.model_steps))
            else:
                await self._report(job, output=res, steps=steps)
        elif isinstance(exc, DelegationPending):
            await self.ack()  # the delegation parked the attempt
            log.info("dwr: task %s attempt %d: %s", job.task_id, job.attempt, exc)
        elif isinstance(exc, ApprovalPending):
            if exc.approval_id:
                await self.ack()
                log.info("dwr: task %s attempt %d: %s", job.task_id, job.attempt, exc)
            else:
                # Recorded, but the reply did not name the approval (a
                # duplicate): the task waits all the same.
                await self.ack()
        elif isinstance(exc, Wait):
            await self._report(job, wait=exc)
        elif isinstance(exc, Permanent):
            await self._report(job, failure=(exc.code, _clip(exc.message or "failed permanently"), False), steps=steps)
        elif isinstance(exc, AttemptEnded):
            await self._report(job, failure=(exc.cause, _clip(str(exc)), True), steps=steps)
        else:
            msg = str(exc) or type(exc).__name__
            code = CAUSE_TIMEOUT if job.cancel_cause == CAUSE_TIMEOUT else ""
            await self._report(job, failure=(code, _clip(msg), True), steps=steps)

    async def _report(self, job: Job, *, output: Any = None, artifacts: Optional[List[Artifact]] = None,
                      steps: Optional[List[ModelStep]] = None, failure: Optional[tuple] = None,
                      wait: Optional[Wait] = None) -> None:
        """Reports the attempt's success, failure or wait, then settles the
        item. A wait needs the attempt claimed (it claims it first when the
        job did not); a success or failure of a job that did not claim
        carries the claim instead."""
        try:
            if wait is not None:
                token, claim = await self.attempt_token(), None
            else:
                token, claim = await self.report_claim()
        except AttemptEnded as e:
            # The job's lazy claim was refused: it never started its attempt.
            await self._settle_fenced(job, str(e), unclaimed=True)
            return
        base: Dict[str, Any] = {"task_id": job.task_id, "attempt": job.attempt}
        if claim is not None:
            base["claim"] = claim
        else:
            base["token"] = token
        step_json = [s.to_json() for s in steps or []]
        try:
            if wait is not None:
                body = dict(base)
                if wait.signal:
                    body.update(kind="signal", signal=wait.signal)
                else:
                    body.update(kind="timer", until=_rfc3339(wait.until or datetime.now(timezone.utc)))
                try:
                    await self.command("task.wait", body, "wait.%s.%d" % (job.task_id, job.attempt))
                    await self.ack()
                    log.info("dwr: task %s attempt %d: %s", job.task_id, job.attempt, wait)
                    return
                except DwrError as e:
                    if e.code != INVALID:
                        raise
                    failure = (CODE_INVALID_RESULT, _clip("the service refused the wait: " + e.message), False)
            if failure is None:
                raw = encode(output) if output is not None else b""
                if len(raw) > MAX_PAYLOAD_BYTES:
                    failure = (CODE_INVALID_RESULT, "the result's output is %d bytes; at most %d are allowed (store large outputs as artifacts)"
                               % (len(raw), MAX_PAYLOAD_BYTES), False)
                else:
                    body = dict(base)
                    if output is not None:
                        body["result"] = output
                    if artifacts:
                        body["artifacts"] = [x.to_json() for x in artifacts]
                    if step_json:
                        body["model_steps"] = step_json
                    if self.ask_next():
                        body["next"] = True
                    try:
                        r = await self.command("task.succeed", body, self._report_id("succeed", job, claim))
                        await self._reported(job, claim, r, "succeeded")
                        return
                    except DwrError as e:
                        if e.code not in (INVALID, TOO_LARGE):
                            raise
                        failure = (CODE_INVALID_RESULT, _clip("the service refused the result: " + e.message), False)
            code, message, retryable = failure
            body = dict(base, error={"code": code, "message": message} if code else {"message": message},
                        retryable=retryable)
            if step_json:
                body["model_steps"] = step_json
            if self.ask_next():
                body["next"] = True
            r = await self.command("task.fail", body, self._report_id("fail", job, claim))
            await self._reported(job, claim, r, "failed%s: %s" % ("" if retryable else " permanently", message))
        except DwrError as e:
            if e.code in (CONFLICT, NOT_FOUND) or e.field == "/token":
                self.end_attempt(job.attempt, CAUSE_LEASE_LOST)
                await self._settle_fenced(job, e.message, unclaimed=claim is not None)
            else:
                log.error("dwr: task %s attempt %d: report refused (%s); the item is left to be redelivered",
                          job.task_id, job.attempt, e)

    async def _reported(self, job: Job, claim: Optional[Dict[str, Any]], r: Any, what: str) -> None:
        """Settles the item of a success or failure the service recorded,
        and keeps the attempt its reply was handed, if any."""
        await self.ack()
        self._handed(r)
        if claim is not None and isinstance(r, dict) and r.get("attempt") != job.attempt:
            # The report's claim failed the task instead of starting the
            # attempt (its goal's budget or its attempts were spent), as a
            # claim would have: the report was not recorded.
            log.info("dwr: task %s attempt %d: refused: the report's claim started no attempt; task is %s",
                     job.task_id, job.attempt, r.get("state"))
            return
        log.info("dwr: task %s attempt %d: %s", job.task_id, job.attempt, what)

    def _report_id(self, kind: str, job: Job, claim: Optional[Dict[str, Any]]) -> str:
        """The command id of the job's report: "<kind>.<task>.<attempt>" —
        and ".<delivery>" after it when the report carries its claim. Two
        deliveries of one item may both report attempt n without a claim
        between them (a holder that hung before claiming, and the
        redelivery that claimed n), and under one identity the same id
        would answer the hung one's report with the other's outcome."""
        if claim is not None:
            return "%s.%s.%d.%d" % (kind, job.task_id, job.attempt, self.delivered)
        return "%s.%s.%d" % (kind, job.task_id, job.attempt)

    async def _settle_fenced(self, job: Job, why: str, unclaimed: bool = False) -> None:
        """Settles the item of an attempt whose report was refused because
        it no longer holds the task — or, when unclaimed, of a job that
        never started its attempt and found the task no longer ready for
        it. The item is acknowledged unless a redelivery of it now runs an
        attempt of its own: JetStream acknowledges by stream sequence, so
        acknowledging here would remove the item from under that delivery's
        holder."""
        if not self.ended:
            def current(t: Dict[str, Any]) -> bool:
                # The service found this attempt not running (or the task
                # not ready for it): a view that still shows it so is behind.
                if unclaimed:
                    return t.get("state") != "ready" or _attempt_count(t) + 1 != job.attempt
                return (_running(t) or {}).get("n") != job.attempt
            t = await self.task_after(current)
            if t is None:
                log.warning("dwr: task %s attempt %d: refused (%s); the views lag, the item is left", job.task_id, job.attempt, why)
                return
            a = _running_from_item(t, self.item["attempt"])
            if a is not None and (a["n"] > job.attempt or unclaimed):
                log.info("dwr: task %s attempt %d: refused: %s (attempt %d holds the item)", job.task_id, job.attempt, why, a["n"])
                return
        await self.ack()
        log.info("dwr: task %s attempt %d: refused: %s", job.task_id, job.attempt, why)

    # -- verifying ----------------------------------------------------------

    async def _judge(self) -> None:
        it = self.item
        if self.encrypted:
            # The item left before the views applied the result it judges:
            # read them at least as of its record. Its result_digest stays
            # the item's (the one the service compares).
            t = await self.get_task(it["task_id"], int(it.get("seq") or 0))
            a = next((x for x in t.get("attempts") or [] if x.get("n") == it["attempt"]), None)
            if a is None:
                await self.nak(self.lease)
                return
            it["input"], it["result"], it["verifications"] = (t.get("spec") or {}).get("input"), a.get("result"), t.get("verifications")
            it["prior_attempts"] = [x for x in t.get("attempts") or [] if x.get("n", 0) < it["attempt"]]
        c = Check(task_id=it["task_id"], workspace=it.get("workspace", ""), queue=it.get("queue", ""),
                  goal_id=it.get("goal_id", ""), key=it.get("key", ""), title=it.get("title", ""), attempt=it["attempt"],
                  input=it.get("input"), result=it.get("result"),
                  artifacts=[Artifact.of(x) for x in it.get("artifacts") or [] if isinstance(x, dict)],
                  result_digest=it.get("result_digest", ""), prior_attempts=list(it.get("prior_attempts") or []),
                  verifications=list(it.get("verifications") or []), _client=self.w.client)
        try:
            v = await self.fn(c)
            if not isinstance(v, Verdict) or v.outcome not in (PASS, FAIL, INCONCLUSIVE):
                raise ValueError("the verifier returned %r, not a Verdict with outcome PASS, FAIL or INCONCLUSIVE" % (v,))
            ev = encode(v.evidence) if v.evidence is not None else b""
            if len(ev) > MAX_PAYLOAD_BYTES:
                raise ValueError("the evidence is %d bytes; at most %d are allowed (store it as an artifact)" % (len(ev), MAX_PAYLOAD_BYTES))
        except Exception as e:  # noqa: BLE001 - any failure of the verifier hands the item back
            log.error("dwr: task %s attempt %d: the verifier failed; the item is delivered again: %s", it["task_id"], it["attempt"], e)
            await self.nak(self.lease)
            return
        body: Dict[str, Any] = {"task_id": it["task_id"], "attempt": it["attempt"], "outcome": v.outcome,
                                "verifier": self.w.executor, "result_digest": c.result_digest}
        if v.evidence is not None:
            body["evidence"] = v.evidence
        if v.evidence_refs:
            body["evidence_refs"] = [x.to_json() for x in v.evidence_refs]
        if self.w.version:
            body["verifier_version"] = self.w.version
        try:
            await self.command("task.verify", body, "verify.%s.%d.%s" % (it["task_id"], it["attempt"], self.w.executor))
            await self.ack()
            log.info("dwr: task %s attempt %d: verdict %s", it["task_id"], it["attempt"], v.outcome)
        except DwrError as e:
            if e.code in (CONFLICT, NOT_FOUND):
                await self.ack()  # the task moved on: the item is stale
            else:
                log.error("dwr: task %s attempt %d: verdict refused: %s", it["task_id"], it["attempt"], e)


def _duration_seconds(d: Any) -> float:
    """Seconds of a duration as the wire writes it ("1m30s", "250ms", or a
    number of seconds: schemas.Duration); 0 when absent or unreadable."""
    if isinstance(d, bool):
        return 0.0
    if isinstance(d, (int, float)):
        return float(d)
    if not isinstance(d, str) or not d:
        return 0.0
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    total, num, i = 0.0, "", 0
    while i < len(d):
        ch = d[i]
        if ch.isdigit() or ch == ".":
            num += ch
            i += 1
            continue
        u = d[i:i + 2] if d[i:i + 2] in units else ch
        if u not in units or not num:
            return 0.0
        total += float(num) * units[u]
        num = ""
        i += len(u)
    return total


class Worker:
    """Takes work items from dwr queues and runs a handler for each, with at
    most ``concurrency`` jobs at once::

        worker = dwr.Worker(nc, lease=30, concurrency=8)

        @worker.task("payments")
        async def pay(job: dwr.Job):
            receipt = await charge(job.input["invoice"], idempotency_key=job.operation_key)
            return {"receipt": receipt}

        await worker.run()  # until worker.stop(), then drains

    A handler returns its output (or a Result with artifacts and model
    steps), raises dwr.Permanent for a failure not to retry, any other
    exception for one to retry, or a Wait (job.sleep, job.await_signal,
    job.request_approval) to park the task. It is cancelled
    (asyncio.CancelledError, job.cancel_cause saying why) when the task is
    cancelled, the lease is lost, or the attempt's deadline passes.

    A job's report asks the service for the handoff unless ``no_handoff``:
    when the reported task leaves a task that depends on it ready on the
    same queue, the report's reply hands this worker that task's attempt,
    started in the report's commit, and the worker runs it at once in the
    same slot — no work item, no fetch, no claim; a chain of tasks runs on
    one worker. It does not ask while it stops (a handed attempt nobody runs
    waits out its lease before the task is ready again). With
    ``no_handoff`` every task comes from the queue."""

    def __init__(self, nc: _nats.Client, *, workspace: str = "default", prefix: str = "dwr",
                 executor: Optional[str] = None, version: str = "", lease: float = 30.0, concurrency: int = 1,
                 max_deliver: int = 5, reconfigure: bool = False, drain_timeout: float = 30.0,
                 no_handoff: bool = False) -> None:
        executor = executor or "%s-%d" % (socket.gethostname() or "executor", os.getpid())
        problems = []
        if not _valid_name(workspace):
            problems.append("workspace %r is not a valid name (lower-case letters, digits, '-' and '_', at most 63)" % workspace)
        if not _valid_name(prefix):
            problems.append("prefix %r is not a valid subject token" % prefix)
        if not executor.strip() or len(executor) > 128:
            problems.append("executor %r must be 1 to 128 bytes" % executor)
        if len(version) > 128:
            problems.append("version is %d bytes; at most 128 are allowed" % len(version))
        if concurrency < 1:
            problems.append("concurrency %d must be at least 1" % concurrency)
        if lease < MIN_LEASE:
            problems.append("lease %ss must be at least %ss" % (lease, MIN_LEASE))
        if max_deliver < 1:
            problems.append("max_deliver %d must be at least 1" % max_deliver)
        if drain_timeout < 0:
            problems.append("drain_timeout must not be negative")
        if problems:
            raise ValueError("dwr: invalid worker: " + "; ".join(problems))
        self.nc = nc
        self.workspace = workspace
        self.prefix = prefix
        self.executor = executor
        self.version = version
        self.lease = lease
        self.concurrency = concurrency
        self.max_deliver = max_deliver
        self.reconfigure = reconfigure
        self.drain_timeout = drain_timeout
        self.no_handoff = no_handoff
        # A job's commands carry its item's trace, not the process's.
        self.client = Client(nc, workspace=workspace, prefix=prefix, retry_for=None, traceparent="")
        self._handlers: Dict[str, tuple] = {}
        self._watches: Dict[str, Set[_Delivery]] = {}
        self._queue_keys: Dict[str, QueueKeys] = {}
        self._jobs: Set["asyncio.Task[None]"] = set()
        self._stop = asyncio.Event()
        # Set once run stops taking work: reports ask for no handoff.
        self._stopping = False
        self._ran = False
        # A test's stand-in for a hung process: no lease renewal, no
        # heartbeat, no claim at a heartbeat (executors' PauseHeartbeats).
        self._pause_heartbeats = False
        self._pulls: Set[_nats.Subscription] = set()  # the fetch loops' pulls in flight

    def task(self, queue: str) -> Callable[[Handler], Handler]:
        """Registers the decorated coroutine function as the handler of
        queue's work items."""
        return self._register(queue, "execute")

    def verifier(self, queue: str) -> Callable[[VerifyHandler], VerifyHandler]:
        """Registers the decorated coroutine function as the verifier of a
        verification queue: it judges results and returns a Verdict."""
        return self._register(queue, "verify")

    def _register(self, queue: str, kind: str) -> Callable[[Any], Any]:
        if not _valid_name(queue):
            raise ValueError("queue %r is not a valid name (lower-case letters, digits, '-' and '_', at most 63)" % queue)
        if queue in self._handlers:
            raise ValueError("queue %s has a handler already" % queue)

        def deco(fn: Any) -> Any:
            if not asyncio.iscoroutinefunction(fn):
                raise TypeError("the handler of queue %s must be an async function" % queue)
            self._handlers[queue] = (kind, fn)
            return fn
        return deco

    def stop(self) -> None:
        """Makes run stop taking work and drain (at once, when called before
        run)."""
        self._stopping = True
        self._stop.set()

    async def run(self) -> None:
        """Takes work items and runs jobs until stop() is called, then drains:
        it stops fetching, lets the running jobs finish and report for up to
        drain_timeout, then cancels the rest (cause "stopping") and leaves
        their items unacknowledged, to be redelivered. A worker runs once.
        A lost connection is made again (the client reconnects, see
        dwr._nats); it raises when the connection closes for good."""
        if self._ran:
            raise RuntimeError("dwr: a worker runs once")
        if not self._handlers:
            raise ValueError("dwr: the worker has no handler: decorate one with @worker.task(queue)")
        self._ran = True
        subs = []
        events = "%s.ev.%s.task." % (self.prefix, self.workspace)
        for name in ENDING_EVENTS:
            subs.append(await self.nc.subscribe(events + "*." + name, cb=self._event_cb(events, name)))
        await self.nc.flush()  # the subscriptions stand before the first job starts
        self.nc.reconnected_cbs.append(self._pull_again)
        slots = asyncio.Semaphore(self.concurrency)
        loop = asyncio.get_running_loop()
        loops = [loop.create_task(self._fetch_loop(q, kind, fn, slots)) for q, (kind, fn) in self._handlers.items()]
        stopper = loop.create_task(self._stop.wait())
        try:
            done, _ = await asyncio.wait(loops + [stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._stopping = True
            for t in loops + [stopper]:
                t.cancel()
            await asyncio.gather(*loops, stopper, return_exceptions=True)
            if self._jobs:
                _, pending = await asyncio.wait(set(self._jobs), timeout=self.drain_timeout or None)
                if pending:
                    log.warning("dwr: the drain timeout passed; cancelling %d jobs, their work items will be redelivered", len(pending))
                    for t in pending:
                        t.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
            for s in subs:
                try:
                    await s.unsubscribe()
                except _nats.NatsError:
                    pass
            self.nc.reconnected_cbs.remove(self._pull_again)
        for t in loops:
            if t in done and not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]

    def _pull_again(self) -> None:
        """Ends the pulls in flight when the connection is back: a pull sent
        before it was lost may have gone with it, and would hold its fetch
        loop until it expired."""
        for sub in self._pulls:
            sub._deliver(_nats.Msg(subject=sub.subject, status="408", description="reconnected"))

    def _event_cb(self, prefix: str, name: str) -> Callable[[_nats.Msg], Awaitable[None]]:
        async def cb(msg: _nats.Msg) -> None:
            task_id = msg.subject[len(prefix):-(len(name) + 1)]
            targets = list(self._watches.get(task_id, ()))
            if not targets:
                return
            if name in ("cancelled", "failed", "rejected"):
                for d in targets:
                    d.end(CAUSE_CANCELLED)
                return
            if len(msg.data) > MAX_ITEM_BYTES:
                return
            try:
                n = int(json.loads(msg.data).get("data", {}).get("attempt", 0))
            except (ValueError, AttributeError, TypeError):
                return
            if n:
                for d in targets:
                    d.end_attempt(n, CAUSE_TIMEOUT if name == "attempt_failed" else CAUSE_LEASE_LOST)
        return cb

    def _queue_keys_of(self, queue: str) -> QueueKeys:
        """The keys of queue's sealed items (_queue_keys.py)."""
        qk = self._queue_keys.get(queue)
        if qk is None:
            qk = self._queue_keys[queue] = QueueKeys(self.client, self.workspace, queue)
        return qk

    def _watch(self, task_id: str, d: _Delivery) -> None:
        self._watches.setdefault(task_id, set()).add(d)

    def _unwatch(self, task_id: str, d: _Delivery) -> None:
        s = self._watches.get(task_id)
        if s is not None:
            s.discard(d)
            if not s:
                del self._watches[task_id]

    async def _configure(self, queue: str) -> float:
        """queue.configure: the queue's lease (and its consumer, which the
        service creates)."""
        r = await self.client.command("queue.configure", {"queue": queue, "lease_ms": int(self.lease * 1000),
                                                          "max_deliver": self.max_deliver,
                                                          "if_unset": not self.reconfigure}, retry_for=30.0)
        lease = float((r or {}).get("lease_ms") or 0) / 1000
        if abs(lease - self.lease) > 1e-3 or (r or {}).get("max_deliver") != self.max_deliver:
            log.warning("dwr: queue %s has other settings than this worker's (lease %ss, max_deliver %s); using the queue's",
                        queue, lease, (r or {}).get("max_deliver"))
        if (r or {}).get("paused"):
            log.warning("dwr: queue %s is paused: it hands out no job until it is resumed (dwr queue resume %s)", queue, queue)
        return max(lease, MIN_LEASE)

    async def _fetch_loop(self, queue: str, kind: str, fn: Any, slots: asyncio.Semaphore) -> None:
        stream = self.prefix.upper() + "_WORK"
        consumer = "%s-%s-%s" % (self.prefix, self.workspace, queue)
        next_subject = "dwrjs.CONSUMER.MSG.NEXT.%s.%s" % (stream, consumer)
        lease: Optional[float] = None
        wait = 0.1
        while True:
            if self.nc.is_closed:
                raise _nats.ConnectionClosedError("dwr: the NATS connection is closed")
            if lease is None:
                try:
                    lease = await self._configure(queue)
                    wait = 0.1
                    log.info("dwr: taking work from queue %s (lease %ss)", queue, lease)
                except DwrError as e:
                    log.warning("dwr: could not configure queue %s (%s); retrying in %ss", queue, e, wait)
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, 5.0)
                    continue
            await slots.acquire()
            n = 1
            while not slots.locked() and n < 256:
                await slots.acquire()
                n += 1
            got = received = 0
            sub = await self.nc.subscribe(self.nc.new_inbox())
            self._pulls.add(sub)
            try:
                pull = {"batch": n, "max_bytes": FETCH_BYTES, "expires": int(FETCH_WINDOW * 1e9)}
                await self.nc.publish(next_subject, json.dumps(pull).encode(), reply=sub.subject)
                deadline = time.monotonic() + FETCH_WINDOW + 5
                while got < n:
                    try:
                        msg = await sub.next_msg(max(deadline - time.monotonic(), 0.01))
                    except _nats.TimeoutError:
                        break
                    if msg.status:
                        if msg.status in ("404", "408"):
                            break  # no messages, or the pull expired
                        if msg.status == "409" and "MaxBytes" in (msg.description or ""):
                            break  # the pull's bytes are used up: the next pull takes the rest
                        if msg.status == "100":
                            continue  # an idle heartbeat
                        log.warning("dwr: queue %s: pull ended: %s %s", queue, msg.status, msg.description)
                        lease = None  # the consumer may be gone: configure again
                        await asyncio.sleep(wait)
                        wait = min(2 * wait, 5.0)
                        break
                    got += 1
                    d = _Delivery(self, msg, queue, lease, kind, fn)
                    t = asyncio.get_running_loop().create_task(self._deliver(d, slots))
                    self._jobs.add(t)
                    t.add_done_callback(self._jobs.discard)
                    received += msg.size
                    if received >= FETCH_BYTES:
                        break  # the pull's bytes used up to the byte: the server sends no status then
            finally:
                self._pulls.discard(sub)
                for _ in range(n - got):
                    slots.release()
                try:
                    await sub.unsubscribe()
                except _nats.NatsError:
                    pass

    async def _deliver(self, d: _Delivery, slots: asyncio.Semaphore) -> None:
        """Handles one work item — and then each attempt its report was
        handed, in turn, in the same slot (the handoff: _Delivery.run_handed).
        The slot is released once the last of them settled."""
        try:
            await d.run()
            while d.next is not None:
                h, d = d.next, d.handoff()
                await d.run_handed(h)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - one item's failure must not stop the worker
            if d.msg is None:
                log.exception("dwr: the handed attempt of task %s: %s; it returns to the queue when its lease lapses",
                              d.item.get("task_id"), e)
            else:
                log.exception("dwr: the work item of task %s: %s; it is left to be redelivered", d.item.get("task_id"), e)
        finally:
            slots.release()
