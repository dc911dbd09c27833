"""The lazy claim, as the Go SDK makes it (executors/lazy_claim.go).

An execute item carries its task, so a short job need not claim before it
runs: the worker starts the job at once, holding the item by in-progress
acks as ever (the work consumer's ack wait is the lease), and claims at the
first of

- the job's first command of the attempt (save_checkpoint, a Wait,
  request_approval, delegate): they carry the attempt's token;
- the moment its first heartbeat is due (lease/3): from there on a long job
  holds a claimed attempt and heartbeats, exactly as a job that claimed
  first;
- its end: then the report itself carries the claim (task.succeed or
  task.fail with ``claim: {executor, executor_version}``), and the service
  starts and ends the attempt in one commit.

A claim or merged report the service refuses because the task is no longer
ready for the attempt (cancelled, or claimed through a redelivery of the
item) ends the job as a lost attempt. A redelivered item, one without its
task, or one that waited in the stream longer than LAZY_MAX_AGE is claimed
first, as before: the job then runs on the task the claim's reply (or the
item) carries — one source of truth per job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from .errors import CAUSE_CANCELLED, CAUSE_LEASE_LOST, CONFLICT, NOT_FOUND, AttemptEnded, DwrError

if TYPE_CHECKING:
    from .worker import Job, Worker

log = logging.getLogger("dwr.worker")

# LAZY_MAX_AGE bounds how long an item may have waited in the stream (in
# seconds) for its job to start unclaimed. An event that ends the task
# before the job's watch begins (a cancellation) is not seen by the watch:
# the claim (or the merged report) is refused then, but the job would have
# run. Claiming first an item that waited longer keeps that window short.
# The stream's timestamp is the NATS server's clock; a skew between it and
# this process's clock shifts the window by as much.
LAZY_MAX_AGE = 1.0

TERMINAL_STATES = ("accepted", "rejected", "failed", "cancelled")


def lazy_item(item: Dict[str, Any], delivered: int, published: float, now: Optional[float] = None) -> bool:
    """Whether a delivery may run its job before claiming: its first
    delivery (delivered) of an item that carries its task, ready for exactly
    the item's attempt, published (seconds since the epoch, the stream's
    timestamp) less than LAZY_MAX_AGE before now."""
    t = item.get("task")
    if not isinstance(t, dict) or delivered != 1:
        return False
    attempts = t.get("attempts") or []
    now = time.time() if now is None else now
    return (t.get("id") == item.get("task_id") and t.get("workspace") == item.get("workspace")
            and (t.get("spec") or {}).get("queue") == item.get("queue") and t.get("state") == "ready"
            and isinstance(item.get("attempt"), int) and len(attempts) + 1 == item["attempt"]
            and now - published < LAZY_MAX_AGE)


class LazyClaim:
    """The attempt's claim of a delivery (mixed into _Delivery): ``token``
    once claimed; ``lazy`` when the job started without a claim;
    ``job_ended`` once the handler returned (its heartbeats claim no more);
    ``sealed`` once its report carries the claim; ``lazy_refused`` (cause,
    why) when a lazy claim was refused. ``claim_lock`` is held while a claim
    is in flight."""

    w: "Worker"
    item: Dict[str, Any]
    delivered: int
    job: Optional["Job"]
    ended: Optional[str]
    beat: Optional[Dict[str, Any]]

    def _init_claim(self) -> None:
        self.token = ""
        self.lazy = False
        self.job_ended = False
        self.sealed = False
        self.lazy_refused: Optional[Tuple[str, str]] = None
        self.claim_lock = asyncio.Lock()

    # Provided by _Delivery.
    async def command(self, name: str, body: Any, command_id: str) -> Any:
        raise NotImplementedError

    async def get_task(self, task_id: str, min_seq: int = 0) -> Dict[str, Any]:
        raise NotImplementedError

    def _cancel(self, cause: str) -> None:
        raise NotImplementedError

    def claim_request(self, omit_task: bool) -> Tuple[Dict[str, Any], str]:
        """The body and the command id of this delivery's claim of its
        attempt, made first or lazily: one id per delivery, so that a claim
        sent again is answered with its first outcome."""
        it = self.item
        body: Dict[str, Any] = {"task_id": it["task_id"], "executor": self.w.executor, "omit_task": omit_task}
        if self.w.version:
            body["executor_version"] = self.w.version
        return body, "claim.%s.%d.%d" % (it["task_id"], it["attempt"], self.delivered)

    def lazy_error(self) -> Optional[AttemptEnded]:
        """The error of the job's refused lazy claim, or None."""
        if self.lazy_refused is None:
            return None
        cause, why = self.lazy_refused
        return AttemptEnded(cause, "the attempt ended (%s): %s" % (cause, why))

    async def attempt_token(self) -> str:
        """The attempt's token, claiming the attempt first when the job
        started without a claim. It raises AttemptEnded when the service
        refused the claim (the job is cancelled then, as a lost attempt);
        a claim not answered is sent again with the same command id."""
        async with self.claim_lock:
            if self.token:
                return self.token
            err = self.lazy_error()
            if err is not None:
                raise err
            if self.sealed:
                raise RuntimeError("dwr: the attempt is claimed by its report")
            return await self._claim_lazily()

    async def claim_at_heartbeat(self, within: float) -> None:
        """Claims an unclaimed job's attempt when its first heartbeat is
        due, so that a long job holds its attempt (and heartbeats) as a job
        that claimed first does. It never holds up the heartbeat loop
        longer than within: when a claim is in flight already (the job's
        first command claims) it does nothing, and a claim of its own not
        answered within is sent again at the next heartbeat, with the same
        command id."""
        if self.claim_lock.locked():
            return
        async with self.claim_lock:
            if not self.lazy or self.job_ended or self.token or self.lazy_refused is not None or self.sealed:
                return
            claim = asyncio.get_running_loop().create_task(self._claim_lazily())
            try:
                await asyncio.wait({claim}, timeout=within)
            finally:
                if not claim.done():
                    claim.cancel()
                    claim.add_done_callback(_retrieve)
                    log.debug("dwr: task %s: the lazy claim was not answered; claiming again at the next heartbeat",
                              self.item.get("task_id"))
                elif not claim.cancelled() and claim.exception() is not None and self.lazy_refused is None:
                    log.debug("dwr: task %s: lazy claim: %s", self.item.get("task_id"), claim.exception())

    async def report_claim(self) -> Tuple[str, Optional[Dict[str, Any]]]:
        """What the job's success or failure carries: the attempt's token
        when it was claimed, or else the claim itself (and no claim is made
        from then on). It raises AttemptEnded when a lazy claim was
        refused."""
        async with self.claim_lock:
            if self.token:
                return self.token, None
            err = self.lazy_error()
            if err is not None:
                raise err
            self.sealed = True
            claim: Dict[str, Any] = {"executor": self.w.executor}
            if self.w.version:
                claim["executor_version"] = self.w.version
            return "", claim

    async def _claim_lazily(self) -> str:
        """Claims the attempt of a job that started without a claim
        (claim_lock held). The item carried the task, so the reply need
        not."""
        it = self.item
        body, cid = self.claim_request(True)
        try:
            r = await self.command("task.claim", body, cid)
        except DwrError as e:
            cause = CAUSE_LEASE_LOST
            if e.code in (CONFLICT, NOT_FOUND):
                cause = await self._ended_cause()
            raise self._refuse_lazily(cause, "the lazy claim was refused (%s): %s" % (e.code, e.message)) from None
        r = r if isinstance(r, dict) else {}
        if r.get("state") != "running" or r.get("attempt") != it["attempt"] or not r.get("token"):
            # The claim ended the task (attempts or budget spent), or
            # answered for another attempt: this job's attempt never runs.
            cause = CAUSE_CANCELLED if r.get("state") in TERMINAL_STATES else CAUSE_LEASE_LOST
            raise self._refuse_lazily(cause, "the lazy claim started no attempt %d; task is %s" % (it["attempt"], r.get("state")))
        self.token = r["token"]
        if not self.job_ended:  # an ended job's heartbeats are retired
            self.beat = {"task_id": it["task_id"], "attempt": it["attempt"], "token": self.token}
        return self.token

    def _refuse_lazily(self, cause: str, why: str) -> AttemptEnded:
        """Records that the job's attempt cannot be claimed and cancels the
        job with cause (claim_lock held)."""
        self.lazy_refused = (cause, why)
        self._cancel(cause)
        err = self.lazy_error()
        assert err is not None
        return err

    async def _ended_cause(self) -> str:
        """Why an unclaimed job's attempt was refused: cancelled when the
        task has ended, lease_lost otherwise (another delivery of the item
        claimed it)."""
        if self.ended:
            return CAUSE_CANCELLED
        try:
            t = await self.get_task(self.item["task_id"])
        except DwrError:
            return CAUSE_LEASE_LOST
        return CAUSE_CANCELLED if t.get("state") in TERMINAL_STATES else CAUSE_LEASE_LOST


def _retrieve(t: "asyncio.Task[Any]") -> None:
    """Retrieves a cancelled claim's outcome (asyncio warns of one never
    retrieved)."""
    if not t.cancelled():
        t.exception()
