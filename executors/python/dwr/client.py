"""The dwr client: commands and queries over NATS request/reply."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import re
import secrets
import time
from typing import Any, AsyncIterator, Dict, Iterable, List, Optional

from . import _nats
from ._canonical import digest_as_written, loads_as_written
from .credentials import connect as _connect, read_signing_key
from .errors import FORBIDDEN, INTERNAL, INVALID, TOO_LARGE, UNAVAILABLE, DwrError

__all__ = ["Client", "encode", "new_command_id", "valid_traceparent", "HEADER_COMMAND_ID", "HEADER_MIN_SEQ",
           "HEADER_TRACEPARENT", "HEADER_TRACESTATE", "ENV_TRACEPARENT", "DEFAULT_TIMEOUT", "MAX_MESSAGE_BYTES"]

HEADER_COMMAND_ID = "Dwr-Command-Id"
HEADER_CORRELATION_ID = "Dwr-Correlation-Id"
HEADER_MIN_SEQ = "Dwr-Min-Seq"
HEADER_LOG_SEQ = "Dwr-Log-Seq"  # the log record a feed event came from
DECISION_PURPOSE = "dwr approval decision v1"  # opens every signed decision
GOAL_ENDED = ("achieved", "failed", "cancelled")
HEADER_UPLOAD = "Dwr-Upload"
HEADER_CHUNK = "Dwr-Chunk"
HEADER_CHUNK_SEQ = "Dwr-Chunk-Seq"
HEADER_ARTIFACT_SIZE = "Dwr-Artifact-Size"
HEADER_ARTIFACT_CHUNKS = "Dwr-Artifact-Chunks"
# W3C trace context in NATS headers (schemas/trace.go): a request carries
# the trace it belongs to, so that one trace follows a task from the command
# that made it ready through its job's commands. ENV_TRACEPARENT carries it
# to a process (dwr worker sets it for the command it runs).
HEADER_TRACEPARENT = "traceparent"
HEADER_TRACESTATE = "tracestate"
ENV_TRACEPARENT = "TRACEPARENT"
# version "00" as the W3C spec writes it (a later version's first four
# fields alike), all-zero trace and parent ids being invalid.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[0-9a-zA-Z._-]*)?$")
# A tracestate is at most 32 list members of at most 256 bytes each.
MAX_TRACESTATE = 32 * 257
# ARTIFACT_CHUNK_BYTES bounds one chunk of an upload or a download.
ARTIFACT_CHUNK_BYTES = 256 << 10

# DEFAULT_TIMEOUT bounds one try of a request, in seconds.
DEFAULT_TIMEOUT = 5.0
# A request that the service could not take is tried again, backing off
# from RETRY_FIRST to RETRY_MAX seconds.
RETRY_FIRST = 0.1
RETRY_MAX = 2.0
# The service takes at most 1 MiB a message; a reply is at most the
# server's max_payload.
MAX_MESSAGE_BYTES = 1 << 20
# A command id is at most 128 bytes.
MAX_COMMAND_ID = 128


def decision_message(approval_id: str, response: str, digest: str) -> bytes:
    """The bytes an approver signs: the purpose, the approval id, the
    response and the action digest, one a line."""
    return ("%s\n%s\n%s\n%s" % (DECISION_PURPOSE, approval_id, response, digest)).encode()


def encode(body: Any) -> bytes:
    """The JSON of a request's body (None: empty)."""
    if body is None:
        return b""
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def new_command_id() -> str:
    """A fresh command id."""
    return "py-" + secrets.token_hex(12)


def valid_traceparent(tp: str) -> bool:
    """Whether tp is a W3C traceparent a propagator takes: version, trace
    id, parent id and flags in lower-case hex, neither id all zeros, version
    00 with nothing after its flags (ff is invalid)."""
    m = _TRACEPARENT.match(tp)
    if m is None:
        return False
    version, trace_id, parent_id, _, rest = m.groups()
    if version == "ff" or (version == "00" and rest) or set(trace_id) == {"0"} or set(parent_id) == {"0"}:
        return False
    return True


def trace_headers(traceparent: str, tracestate: str = "") -> Dict[str, str]:
    """The headers that carry a trace: {} when traceparent is not a valid
    one (a tracestate without its traceparent means nothing)."""
    if not traceparent or not valid_traceparent(traceparent):
        return {}
    h = {HEADER_TRACEPARENT: traceparent}
    if tracestate and len(tracestate) <= MAX_TRACESTATE and "\r" not in tracestate and "\n" not in tracestate:
        h[HEADER_TRACESTATE] = tracestate
    return h


def _parse_time(s: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (nanoseconds cut)."""
    from datetime import datetime

    s = s.strip()
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    # Python before 3.11 takes at most 6 fraction digits.
    if "." in s:
        head, _, rest = s.partition(".")
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        s = head + "." + rest[:i][:6].ljust(6, "0") + rest[i:]
    return datetime.fromisoformat(s).timestamp()


# The options of dwr.connect that Client.connect passes on.
_CONNECT_OPTIONS = ("name", "tls", "allow_reconnect", "max_reconnect_attempts", "reconnect_time_wait",
                    "ping_interval", "connect_timeout")


class Client:
    """A client of one workspace of dwr, on a NATS connection.

    Commands (``create_goal``, ``submit_plan``, ``create_task``,
    ``cancel_task``, ``signal``, or any by name with ``command``) carry a
    fresh command id unless given one; a request the service could not take
    (no responder, no writer, a timeout, an ``unavailable`` reply) is sent
    again with the same id, backing off, for up to ``retry_for`` seconds
    (None: until cancelled), so that a retry is answered with the first
    outcome. Queries (``task``, ``goal``, ``goal_by_key``, or any by name with ``query``) read
    the client's own writes: each carries, as ``Dwr-Min-Seq``, the highest
    log sequence the client's commands were answered with. A refusal raises
    ``DwrError`` with the service's code, message and fields.

    ``traceparent`` (a W3C traceparent; default: the ``TRACEPARENT``
    environment variable, as ``dwr worker`` sets it for the process it
    runs; "": none) is sent with every request, so that the service's spans
    of them join that trace; a request's own ``traceparent=`` overrides it."""

    def __init__(self, nc: _nats.Client, *, workspace: str = "default", prefix: str = "dwr",
                 timeout: float = DEFAULT_TIMEOUT, retry_for: Optional[float] = 60.0,
                 traceparent: Optional[str] = None, tracestate: str = "") -> None:
        if traceparent is None:
            # A malformed value in the environment is ignored, as
            # OpenTelemetry's propagators ignore it.
            env = os.environ.get(ENV_TRACEPARENT, "").strip()
            traceparent, tracestate = (env, tracestate) if valid_traceparent(env) else ("", "")
        elif traceparent and not valid_traceparent(traceparent):
            raise ValueError("dwr: traceparent %r is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)" % traceparent)
        self.traceparent = traceparent
        self.tracestate = tracestate if traceparent else ""
        self.nc = nc
        self.workspace = workspace
        self.prefix = prefix
        self.timeout = timeout
        self.retry_for = retry_for
        self.seq = 0  # the highest log sequence a command of this client was answered with
        self._owns = False

    @classmethod
    async def connect(cls, url: Optional[str] = None, creds: Optional[str] = None, **kwargs: Any) -> "Client":
        """Connects with a credential file (see dwr.connect, which takes the
        connection's options: tls, allow_reconnect, ...) and returns a client
        that closes the connection on close(); the rest of kwargs are the
        client's (workspace, prefix, timeout, retry_for, traceparent)."""
        conn = {k: kwargs.pop(k) for k in list(kwargs) if k in _CONNECT_OPTIONS}
        nc = await _connect(url, creds, **conn)
        c = cls(nc, **kwargs)
        c._owns = True
        return c

    async def close(self) -> None:
        if self._owns:
            await self.nc.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the exchange -------------------------------------------------------

    async def request(self, subject: str, body: Any = None, headers: Optional[Dict[str, str]] = None, *,
                      timeout: Optional[float] = None, retry: bool = True,
                      retry_for: Any = "default", traceparent: Optional[str] = None,
                      tracestate: str = "", numbers_as_written: bool = False) -> Dict[str, Any]:
        """Sends a request to subject and returns the service's reply (the
        whole envelope: ok, result, seq, next) when it is ok; raises
        DwrError otherwise. Retried as the class says unless retry is
        False. It carries the trace traceparent (default: the client's).
        numbers_as_written keeps the reply's numbers as the service wrote
        them, as str (to digest a part of it as the service does)."""
        data = encode(body)
        if len(data) > MAX_MESSAGE_BYTES:
            raise DwrError(TOO_LARGE, "the request is %d bytes; at most %d are allowed" % (len(data), MAX_MESSAGE_BYTES))
        headers = self._traced(headers, traceparent, tracestate)
        span = self.retry_for if retry_for == "default" else retry_for
        give_up = None if span is None else time.monotonic() + float(span)
        wait = RETRY_FIRST
        tries = 0
        while True:
            tries += 1
            try:
                return await self._try(subject, data, headers, timeout or self.timeout, numbers_as_written)
            except DwrError as e:
                if e.code != UNAVAILABLE or not retry or self.nc.is_closed:
                    raise
                pause = wait + random.uniform(0, wait / 2)
                if e.retry_after:
                    try:
                        pause = min(max(_parse_time(e.retry_after) - time.time(), 0), RETRY_MAX) + random.uniform(0, 0.05)
                    except ValueError:
                        pass
                if give_up is not None and time.monotonic() + pause > give_up:
                    raise DwrError(UNAVAILABLE, "%s: gave up after %d tries; the last: %s" % (subject, tries, e.message),
                                   e.fields, e.retry_after) from e
                await asyncio.sleep(pause)
                wait = min(2 * wait, RETRY_MAX)

    def _traced(self, headers: Optional[Dict[str, str]], traceparent: Optional[str],
                tracestate: str) -> Optional[Dict[str, str]]:
        """headers with the trace of a request: traceparent (and
        tracestate), or the client's when traceparent is None."""
        if traceparent is None:
            traceparent, tracestate = self.traceparent, self.tracestate
        trace = trace_headers(traceparent, tracestate)
        if not trace:
            return headers
        return dict(headers or {}, **trace)

    async def _try(self, subject: str, data: bytes, headers: Optional[Dict[str, str]],
                   timeout: float, numbers_as_written: bool = False) -> Dict[str, Any]:
        try:
            msg = await self.nc.request(subject, data, timeout=timeout, headers=headers)
        except _nats.PermissionsViolation as e:
            raise DwrError(FORBIDDEN, "%s: the NATS server refused the subject to this credential: %s" % (subject, e)) from None
        except _nats.NoRespondersError:
            raise DwrError(UNAVAILABLE, "%s: no responders: is dwr serve running?" % subject) from None
        except _nats.TimeoutError:
            raise DwrError(UNAVAILABLE, "%s: no reply within %ss" % (subject, timeout)) from None
        except _nats.ConnectionClosedError as e:
            raise DwrError(UNAVAILABLE, "%s: %s" % (subject, e)) from None
        except (_nats.NatsError, ValueError) as e:
            raise DwrError(INVALID, "%s: %s" % (subject, e)) from None
        return self._decode(subject, msg, numbers_as_written)

    def _decode(self, subject: str, msg: _nats.Msg, numbers_as_written: bool = False) -> Dict[str, Any]:
        if len(msg.data) > max(self.nc.max_payload, MAX_MESSAGE_BYTES):
            raise DwrError(INTERNAL, "%s: a reply of %d bytes is larger than any dwr reply" % (subject, len(msg.data)))
        try:
            r = loads_as_written(msg.data) if numbers_as_written else json.loads(msg.data)
        except ValueError as e:
            raise DwrError(INTERNAL, "%s: the answer is not a dwr reply: %s" % (subject, e)) from None
        if not isinstance(r, dict) or not isinstance(r.get("ok"), bool):
            raise DwrError(INTERNAL, "%s: the answer is not a dwr reply" % subject)
        if not r["ok"]:
            raise DwrError.from_reply(r.get("error"))
        return r

    async def command(self, name: str, body: Any = None, *, command_id: Optional[str] = None,
                      timeout: Optional[float] = None, retry: bool = True, retry_for: Any = "default",
                      traceparent: Optional[str] = None, tracestate: str = "") -> Any:
        """Sends command name (``dwr.cmd.<workspace>.<name>``) with body and
        returns its result; retried with the same command id (a fresh one
        when command_id is None; "" sends none, as task.heartbeat wants).
        It carries the trace traceparent (default: the client's; "": none)."""
        cid = new_command_id() if command_id is None else command_id
        if len(cid.encode()) > MAX_COMMAND_ID:
            raise DwrError(INVALID, "the command id is longer than %d bytes" % MAX_COMMAND_ID)
        r = await self.request("%s.cmd.%s.%s" % (self.prefix, self.workspace, name), body,
                               {HEADER_COMMAND_ID: cid} if cid else None,
                               timeout=timeout, retry=retry, retry_for=retry_for, traceparent=traceparent,
                               tracestate=tracestate)
        seq = r.get("seq")
        if isinstance(seq, int) and seq > self.seq:
            self.seq = seq
        return r.get("result")

    async def query_reply(self, name: str, body: Any = None, *, timeout: Optional[float] = None,
                          headers: Optional[Dict[str, str]] = None, retry_for: Any = "default",
                          traceparent: Optional[str] = None, tracestate: str = "",
                          numbers_as_written: bool = False) -> Dict[str, Any]:
        """Sends query name (``dwr.q.<workspace>.<name>``) and returns the
        whole reply (its ``next`` pages on); numbers_as_written as
        request()."""
        h = dict(headers or {})
        seq = max(self.seq or 0, int(h.get(HEADER_MIN_SEQ) or 0))
        if seq:
            h[HEADER_MIN_SEQ] = str(seq)
        return await self.request("%s.q.%s.%s" % (self.prefix, self.workspace, name), body if body is not None else {},
                                  h or None, timeout=timeout, retry_for=retry_for, traceparent=traceparent,
                                  tracestate=tracestate, numbers_as_written=numbers_as_written)

    async def query(self, name: str, body: Any = None, **kwargs: Any) -> Any:
        """Sends query name and returns its result."""
        return (await self.query_reply(name, body, **kwargs)).get("result")

    # -- commands -----------------------------------------------------------

    async def create_goal(self, title: str, *, tasks: Optional[List[Dict[str, Any]]] = None,
                          labels: Optional[Dict[str, str]] = None, priority: Optional[int] = None,
                          command_id: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
        """goal.create: a goal, and with tasks its first plan in the same
        commit; labels are its labels (name: value), which goals(labels=)
        selects by; priority (1 first .. 5 last; None: 3) is the turn, in a
        queue whose order is priority, of its tasks that give none of their
        own. The other fields of goal.create pass through as given: with
        ``key=`` (the caller's own name for the goal, an order id: 1-128
        letters, digits, '_', '.' or '-', starting with a letter or digit)
        a goal.create while an open goal holds the key is refused (``DwrError``
        code ``conflict``, field ``/key``), or with ``if_open="use"`` answered
        with that open goal (``duplicate``: True, its ``id``); ``goal_by_key``
        reads it. The result names the goal (``id``) and its tasks."""
        body: Dict[str, Any] = {"title": title, **fields}
        if tasks is not None:
            body["tasks"] = tasks
        if labels:
            body["labels"] = labels
        if priority is not None:
            body["priority"] = priority
        return await self.command("goal.create", body, command_id=command_id)

    async def submit_plan(self, goal_id: str, tasks: List[Dict[str, Any]], *,
                          command_id: Optional[str] = None) -> Dict[str, Any]:
        """plan.submit: a plan of the goal, or a later version revising it."""
        return await self.command("plan.submit", {"goal_id": goal_id, "tasks": tasks}, command_id=command_id)

    async def create_task(self, queue: str, input: Any = None, *, title: str = "", command_id: Optional[str] = None,
                          labels: Optional[Dict[str, str]] = None, **spec: Any) -> Dict[str, Any]:
        """task.create: a standalone task on queue (spec: retry, timeout,
        verification, priority, ... as schemas/commands/task.create.json
        says), with labels, which tasks(labels=) finds it by. The result's
        ``id`` names it."""
        s: Dict[str, Any] = {"queue": queue, **spec}
        if title:
            s["title"] = title
        if input is not None:
            s["input"] = input
        body: Dict[str, Any] = {"spec": s}
        if labels:
            body["labels"] = labels
        return await self.command("task.create", body, command_id=command_id)

    async def cancel_task(self, task_id: str, reason: str = "", *, command_id: Optional[str] = None) -> Dict[str, Any]:
        """task.cancel."""
        body: Dict[str, Any] = {"task_id": task_id}
        if reason:
            body["reason"] = reason
        return await self.command("task.cancel", body, command_id=command_id)

    async def cancel_goal(self, goal_id: str, reason: str = "", *, command_id: Optional[str] = None) -> Dict[str, Any]:
        """goal.cancel."""
        body: Dict[str, Any] = {"goal_id": goal_id}
        if reason:
            body["reason"] = reason
        return await self.command("goal.cancel", body, command_id=command_id)

    async def label_goal(self, goal_id: str, *, set: Optional[Dict[str, str]] = None,
                         remove: Optional[Iterable[str]] = None, command_id: Optional[str] = None) -> Dict[str, Any]:
        """goal.label: gives the goal the labels of set (one already there
        takes the new value) and takes away those named in remove, whatever
        the goal's state. A change that leaves its labels as they are
        records nothing (the result's ``duplicate``)."""
        return await self._label("goal", goal_id, set, remove, command_id)

    async def prioritize_goal(self, goal_id: str, priority: int, *,
                              command_id: Optional[str] = None) -> Dict[str, Any]:
        """goal.prioritize: sets the goal's priority, 1 (first) to 5 (last):
        its tasks that give none of their own take their turn by it in a
        queue whose order is priority, those waiting at once. The same
        priority again records nothing (the result's ``duplicate``)."""
        return await self.command("goal.prioritize", {"goal_id": goal_id, "priority": priority},
                                  command_id=command_id)

    async def label_task(self, task_id: str, *, set: Optional[Dict[str, str]] = None,
                         remove: Optional[Iterable[str]] = None, command_id: Optional[str] = None) -> Dict[str, Any]:
        """task.label: label_goal's, for a task."""
        return await self._label("task", task_id, set, remove, command_id)

    async def _label(self, what: str, id: str, set: Optional[Dict[str, str]], remove: Optional[Iterable[str]],
                     command_id: Optional[str]) -> Dict[str, Any]:
        """goal.label or task.label (what): set and remove labels of id."""
        body: Dict[str, Any] = {what + "_id": id}
        if set:
            body["set"] = set
        if remove:
            body["remove"] = list(remove)
        if len(body) == 1:
            raise ValueError("label_%s: give labels to set or names to remove" % what)
        return await self.command(what + ".label", body, command_id=command_id)

    async def signal(self, task_id: str, name: str, payload: Any = None, *,
                     command_id: Optional[str] = None) -> Dict[str, Any]:
        """task.signal: resumes a task waiting for the signal name (or keeps
        it for the task's next wait for it)."""
        body: Dict[str, Any] = {"task_id": task_id, "name": name}
        if payload is not None:
            body["payload"] = payload
        return await self.command("task.signal", body, command_id=command_id)

    async def run_ritual(self, name: str, params: Optional[Dict[str, Any]] = None, *, version: Optional[int] = None,
                         labels: Optional[Dict[str, str]] = None, key: Optional[str] = None,
                         if_open: Optional[str] = None, command_id: Optional[str] = None) -> Dict[str, Any]:
        """ritual.run: creates a goal and its first plan, in one commit, from
        a version of the ritual name (None: the latest) with params in place
        of its parameters (one left out takes its schema's default), as
        create_goal with tasks would. labels are set on the goal over those
        of the ritual's goal template, key (goal.create's key) over the one
        it renders, and if_open ("refuse", the default, or "use") says what
        the run does while an open goal holds the key. The result names the
        goal (``id``) and its tasks, as create_goal's does. A param that
        fails the ritual's parameters schema raises ``DwrError`` with code
        ``invalid``, naming ``/params/<name>``."""
        body: Dict[str, Any] = {"name": name}
        if version is not None:
            body["version"] = version
        if params is not None:
            body["params"] = params
        if labels:
            body["labels"] = labels
        if key is not None:
            body["key"] = key
        if if_open is not None:
            body["if_open"] = if_open
        return await self.command("ritual.run", body, command_id=command_id)

    # -- queues (a workspace admin's) ---------------------------------------

    async def configure_queue(self, queue: str, *, lease_ms: int = 30000, max_deliver: int = 5,
                              max_running: Optional[int] = None, rate_limit: Optional[int] = None,
                              rate_period_ms: Optional[int] = None, order: Optional[str] = None,
                              if_unset: bool = False, command_id: Optional[str] = None) -> Dict[str, Any]:
        """queue.configure: sets a queue's lease (lease_ms: how long an
        executor holds a job before it is delivered again) and max_deliver
        (how many deliveries before its work item is quarantined). Each of
        the others, None, keeps the queue's as it is: max_running (how many
        of its jobs may run at once across all its executors: N > 0 sets it,
        -1 removes the limit), rate_limit (how many of its work items may be
        handed out in any rate_period_ms, 1000 to 86400000 ms, default 1000:
        N > 0 sets it, -1 removes it) and order ("fifo", or "priority": by
        their tasks' priority). With if_unset, a queue already configured
        keeps its settings. The result carries the settings in effect
        (``queue``, ``lease_ms``, ``max_deliver``, ``max_running``,
        ``rate_limit``, ``rate_period_ms``, ``order``, ``paused``) and
        ``duplicate`` when nothing changed."""
        body: Dict[str, Any] = {"queue": queue, "lease_ms": lease_ms, "max_deliver": max_deliver}
        for k, v in (("max_running", max_running), ("rate_limit", rate_limit), ("rate_period_ms", rate_period_ms),
                     ("order", order)):
            if v is not None:
                body[k] = v
        if if_unset:
            body["if_unset"] = True
        return await self.command("queue.configure", body, command_id=command_id)

    async def pause_queue(self, queue: str, *, command_id: Optional[str] = None) -> Dict[str, Any]:
        """queue.pause: the queue hands out no job, and no report hands its
        sender the queue's next task, until resume_queue; the jobs already
        handed out run on, and tasks keep joining it. The result carries
        ``paused``: True and the queue's settings in effect, as
        configure_queue's does."""
        return await self.command("queue.pause", {"queue": queue}, command_id=command_id)

    async def resume_queue(self, queue: str, *, command_id: Optional[str] = None) -> Dict[str, Any]:
        """queue.resume: a paused queue hands out its jobs again, those that
        joined it meanwhile first. The result carries the queue's settings
        in effect, as configure_queue's does."""
        return await self.command("queue.resume", {"queue": queue}, command_id=command_id)

    async def delete_queue(self, queue: str, *, command_id: Optional[str] = None) -> Dict[str, Any]:
        """queue.delete: removes a queue that no task that has not ended is
        given — its consumer and its settings —, so that it no longer counts
        against the workspace's bound on queues."""
        return await self.command("queue.delete", {"queue": queue}, command_id=command_id)

    # -- queries ------------------------------------------------------------

    async def task(self, task_id: str) -> Dict[str, Any]:
        """task.get: the task as the views hold it (schemas.Task as JSON)."""
        return await self.query("task.get", {"id": task_id})

    async def goal(self, goal_id: str) -> Dict[str, Any]:
        """goal.get: the goal with its plan's tasks (schemas.GoalView)."""
        return await self.query("goal.get", {"id": goal_id})

    async def goal_by_key(self, key: str) -> Dict[str, Any]:
        """goal.get by key: the goal made last with key (create_goal's
        ``key=``), open or ended, as ``goal`` reads it; none raises
        ``DwrError`` with code ``not_found``."""
        return await self.query("goal.get", {"key": key})

    async def list(self, name: str, body: Optional[Dict[str, Any]] = None, **kwargs: Any) -> AsyncIterator[Any]:
        """Reads list query name page after page, following each reply's
        ``next``, and yields its items: ``async for t in c.list("task.list",
        {"goal_id": g})``. ``limit`` in body sets the page size (at most
        10,000)."""
        q = {k: v for k, v in (body or {}).items() if v is not None}
        while True:
            r = await self.query_reply(name, q, **kwargs)
            for item in r.get("result") or []:
                yield item
            nxt = r.get("next")
            if not nxt:
                return
            q["after"] = nxt

    def tasks(self, *, goal_id: Optional[str] = None, state: Optional[str] = None,
              queue: Optional[str] = None, labels: Optional[Dict[str, str]] = None,
              limit: Optional[int] = None) -> AsyncIterator[Dict[str, Any]]:
        """task.list: the workspace's tasks — of a goal, in a state, of a
        queue, holding every one of labels with its value, or all — page
        after page."""
        return self.list("task.list", {"goal_id": goal_id, "state": state, "queue": queue, "labels": labels or None,
                                       "limit": limit})

    def goals(self, *, state: Optional[str] = None, schedule: Optional[str] = None,
              labels: Optional[Dict[str, str]] = None, newest_first: bool = False,
              limit: Optional[int] = None) -> AsyncIterator[Dict[str, Any]]:
        """goal.list: the workspace's goals (of a state, those a schedule's
        slots started, and those holding every one of labels with its value,
        when given), the oldest first (the newest with newest_first), page
        after page."""
        return self.list("goal.list", {"state": state, "schedule": schedule, "labels": labels or None,
                                       "newest_first": newest_first or None, "limit": limit})

    def queues(self) -> AsyncIterator[Dict[str, Any]]:
        """queue.list: the workspace's queues — those configured, then those
        that stand without a configuration —, each with its settings
        (``name``, ``lease_ms``, ``max_deliver``, ``max_running``,
        ``rate_limit``, ``rate_period_ms``, ``order``, ``paused``) and what
        its consumer holds: ``pending`` (work items waiting to be
        delivered), ``in_flight`` (delivered, not acknowledged yet) and
        ``waiting_pulls`` (executors' pulls waiting for an item: items
        pending with none in flight and no pull waiting mean no executor
        takes the queue), page after page."""
        return self.list("queue.list")

    async def decide_approval(self, approval_id: str, response: str, key_file: str, *,
                              approver: Optional[str] = None, comment: str = "",
                              command_id: Optional[str] = None) -> Dict[str, Any]:
        """approval.decide, signed: reads the approval (approval.get),
        computes its action's digest itself and refuses to sign unless it is
        the one the approval names, then signs (approval id, response,
        digest) with the approver's Ed25519 key in key_file — what ``dwr keys
        create`` writes: a PEM "PRIVATE KEY" block (PKCS #8) after a
        "# approver: NAME" line — and sends the decision. approver defaults
        to the name the file gives. The private key never leaves this
        process; a refusal raises DwrError (forbidden, with its reason)."""
        key, named = read_signing_key(key_file)
        who = approver or named
        if not who:
            raise ValueError("dwr: key file %s names no approver (no '# approver:' line): pass approver=" % key_file)
        # The action's numbers as the service wrote them: decoded to floats
        # and written again, 1e21 would digest as 1e+21.
        a = await self.query("approval.get", {"id": approval_id}, numbers_as_written=True)
        digest = digest_as_written(a.get("action"))
        if digest != a.get("action_digest"):
            raise ValueError("dwr: approval %s names action digest %s, but the action shown digests to %s: not signing"
                             % (a.get("id"), a.get("action_digest"), digest))
        sig = key.sign(decision_message(a["id"], response, digest))
        body: Dict[str, Any] = {"approval_id": a["id"], "approver": who, "response": response, "action_digest": digest,
                                "signature": base64.b64encode(sig).decode()}
        if comment:
            body["comment"] = comment
        return await self.command("approval.decide", body, command_id=command_id)

    async def wait_goal(self, goal_id: str, *, timeout: Optional[float] = None, poll: float = 2.0) -> Dict[str, Any]:
        """Waits until the goal has ended (achieved, failed or cancelled) and
        returns it as goal() does then. It reads the goal again at each of
        its events on the feed — with the event's log sequence as
        ``Dwr-Min-Seq``, so that the read sees the state the event left —
        and every ``poll`` seconds in case the feed missed one (the live
        feed is not acknowledged). It raises ``asyncio.TimeoutError`` when
        ``timeout`` seconds pass first (None: none)."""
        seen = 0
        woken = asyncio.Event()

        async def on_event(msg: _nats.Msg) -> None:
            nonlocal seen
            try:
                seen = max(seen, int((msg.headers or {}).get(HEADER_LOG_SEQ) or 0))
            except ValueError:
                pass
            woken.set()

        sub = await self.nc.subscribe("%s.ev.%s.goal.%s.*" % (self.prefix, self.workspace, goal_id), cb=on_event)

        async def follow() -> Dict[str, Any]:
            await self.nc.flush()  # the subscription stands before the first read
            while True:
                woken.clear()
                g = await self.query("goal.get", {"id": goal_id}, headers={HEADER_MIN_SEQ: str(seen)} if seen else None)
                if g.get("state") in GOAL_ENDED:
                    return g
                try:
                    await asyncio.wait_for(woken.wait(), poll)
                except asyncio.TimeoutError:
                    pass

        try:
            return await asyncio.wait_for(follow(), timeout)
        finally:
            await sub.unsubscribe()

    # -- artifacts ----------------------------------------------------------

    async def put_artifact(self, data: Any, *, name: str = "", type: str = "", task_id: str = "",
                           traceparent: Optional[str] = None, tracestate: str = "") -> Dict[str, Any]:
        """Stores data (bytes, or a binary file object read to its end) as an
        artifact, in chunks of 256 KiB, and returns its info (``sha256``,
        ``size``, ``name``, ``type``, ``duplicate``...). The service checks
        the chunks against the size and digest sent."""
        trace = {"traceparent": traceparent, "tracestate": tracestate}
        upload = secrets.token_hex(13)
        h = hashlib.sha256()
        size = 0
        chunks = 0
        read = (lambda n: data.read(n)) if hasattr(data, "read") else None
        view = memoryview(bytes(data)) if read is None else None
        while True:
            if read is not None:
                chunk = read(ARTIFACT_CHUNK_BYTES)
            else:
                assert view is not None
                chunk = bytes(view[size:size + ARTIFACT_CHUNK_BYTES])
            if not chunk:
                break
            h.update(chunk)
            await self.query("artifact.chunk", bytes(chunk),
                             headers={HEADER_UPLOAD: upload, HEADER_CHUNK: str(chunks)}, **trace)
            chunks += 1
            size += len(chunk)
        put: Dict[str, Any] = {"upload": upload, "chunks": chunks, "size": size, "sha256": h.hexdigest()}
        for k, v in (("name", name), ("type", type), ("task_id", task_id)):
            if v:
                put[k] = v
        return await self.query("artifact.put", put, timeout=max(self.timeout, 30.0 + size / (2 << 20)), **trace)

    async def get_artifact(self, sha256: str, *, max_bytes: int = 64 << 20, traceparent: Optional[str] = None,
                           tracestate: str = "") -> bytes:
        """Reads the artifact stored under the digest sha256, chunk after
        chunk, and checks its bytes against the digest: DwrError
        ``invalid`` when they differ or when it is larger than max_bytes."""
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise DwrError(INVALID, "/sha256: must be 64 lower-case hex digits", [{"pointer": "/sha256",
                                                                                  "message": "must be 64 lower-case hex digits"}])
        subject = "%s.q.%s.artifact.get" % (self.prefix, self.workspace)
        out = bytearray()
        after = 0
        got = 0
        while True:
            msg = await self._chunk(subject, {"sha256": sha256, "after": after} if after else {"sha256": sha256},
                                    self._traced(None, traceparent, tracestate))
            hdr = msg.headers or {}
            try:
                seq, size, total = int(hdr[HEADER_CHUNK_SEQ]), int(hdr[HEADER_ARTIFACT_SIZE]), int(hdr[HEADER_ARTIFACT_CHUNKS])
            except (KeyError, ValueError):
                raise DwrError(INTERNAL, "%s: the answer is not a chunk of artifact %s" % (subject, sha256)) from None
            if size > max_bytes:
                raise DwrError(TOO_LARGE, "artifact %s is %d bytes; at most %d are read" % (sha256, size, max_bytes))
            if total == 0:
                break
            if seq <= after:
                raise DwrError(INTERNAL, "%s: the answer is not the next chunk of artifact %s" % (subject, sha256))
            out += msg.data
            got += 1
            after = seq
            if got >= total:
                break
        if hashlib.sha256(out).hexdigest() != sha256:
            raise DwrError(INVALID, "artifact %s: the bytes read do not have its digest" % sha256)
        return bytes(out)

    async def _chunk(self, subject: str, body: Dict[str, Any], headers: Optional[Dict[str, str]]) -> _nats.Msg:
        """One chunk of a download: a reply with Dwr-Chunk-Seq, or a dwr
        error reply (raised)."""
        data = encode(body)
        wait = RETRY_FIRST
        give_up = None if self.retry_for is None else time.monotonic() + self.retry_for
        while True:
            try:
                msg = await self.nc.request(subject, data, timeout=self.timeout, headers=headers)
                if msg.headers and HEADER_CHUNK_SEQ in msg.headers:
                    return msg
                self._decode(subject, msg)
                raise DwrError(INTERNAL, "%s: an ok reply without a chunk" % subject)
            except (_nats.TimeoutError, _nats.NoRespondersError) as e:
                if give_up is not None and time.monotonic() > give_up:
                    raise DwrError(UNAVAILABLE, "%s: %s" % (subject, e)) from None
            except DwrError as e:
                if e.code != UNAVAILABLE or (give_up is not None and time.monotonic() > give_up):
                    raise
            await asyncio.sleep(wait)
            wait = min(2 * wait, RETRY_MAX)
