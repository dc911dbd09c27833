"""dwr.Worker's lazy claim against a running dwr serve: run by go test -run
TestPythonLazyClaim ./integration/ (DWR_SERVER; DWR_CREDS a client's
credential; DWR_EXECUTOR_CREDS an executor's of queue pyl). Each scenario
prints "task <scenario> <task id>" for the Go test, which watches the
commands on the bus and checks which were sent; this program checks what
the worker and the service did. It also runs a chain of tasks, whose later
tasks the reports are handed (the handoff: the service runs here without
payload encryption, which offers none), and again with no_handoff. Not a
unittest module: it needs the service."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Callable, Dict, List

import dwr
from _live import wait_task

QUEUE = "pyl"
HUNG_QUEUE = "pyh"
LEASE = 3.0


async def wait_for(what: str, cond: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(what + ": not within 30 s")
        await asyncio.sleep(0.02)


def show(scenario: str, task_id: str) -> None:
    print("task %s %s" % (scenario, task_id), flush=True)


async def chain(c: dwr.Client, label: str) -> List[Dict[str, Any]]:
    """Runs a goal of three tasks on the queue, each depending on the one
    before, and returns their attempts (each task's one), in order."""
    g = await c.create_goal("chain " + label, tasks=[
        {"key": "a", "queue": QUEUE, "input": {"role": "chain"}},
        {"key": "b", "queue": QUEUE, "input": {"role": "chain"}, "depends_on": ["a"]},
        {"key": "c", "queue": QUEUE, "input": {"role": "chain"}, "depends_on": ["b"]}])
    ids = {t["key"]: t["task_id"] for t in g["tasks"]}
    out = []
    for key in ("a", "b", "c"):
        t = await wait_task(c, ids[key], "accepted", lambda t: t["state"] == "accepted")
        assert len(t["attempts"]) == 1, (label, key, t["attempts"])
        out.append(t["attempts"][0])
    assert out[2]["result"] == "c+b+a", (label, out[2])
    return out


class Outcomes(logging.Handler):
    """The worker's log lines, to wait for a job's outcome."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def seen(self, *parts: str) -> bool:
        return any(all(p in line for p in parts) for line in self.lines)


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    outcomes = Outcomes()
    logging.getLogger("dwr.worker").addHandler(outcomes)
    c = await dwr.Client.connect(os.environ["DWR_SERVER"], os.environ["DWR_CREDS"])
    nc = await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"])
    # Another executor of the queue, as a second process would be.
    other = dwr.Client(await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"]))
    worker = dwr.Worker(nc, lease=LEASE, concurrency=4, executor="py-lazy", version="v1")
    started: Dict[str, asyncio.Event] = {"cancel": asyncio.Event(), "taken": asyncio.Event()}
    causes: Dict[str, Any] = {}

    @worker.task(QUEUE)
    async def handle(job: dwr.Job) -> Any:
        role = job.input.get("role")
        if role == "short":
            return {"done": True}
        if role == "chain":
            return "+".join([job.key] + [d["result"] for d in job.dependencies.values()])
        if role == "fail":
            raise dwr.Permanent("no", "nope")
        if role == "long":
            await asyncio.sleep(LEASE * 1.1)  # past two heartbeats (lease/3)
            return {"long": True}
        if role == "checkpoint":
            await job.save_checkpoint({"step": 1})
            return {"saved": True}
        if role == "wait":
            if job.signal is None:
                raise job.await_signal("go")
            return {"signal": job.signal.payload}
        if role in ("cancel", "taken"):
            if job.attempt > 1:
                return {"attempt": job.attempt}
            started[role].set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                causes[role] = job.cancel_cause
                raise
        raise dwr.Permanent("unknown role %r" % role)

    run = asyncio.get_running_loop().create_task(worker.run())

    # A short job: its report carries the claim, and the attempt is recorded.
    s = await c.create_task(QUEUE, {"role": "short"}, title="short")
    t = await wait_task(c, s["id"], "accepted", lambda t: t["state"] == "accepted")
    assert len(t["attempts"]) == 1 and t["attempts"][0]["executor"] == "py-lazy", t["attempts"]
    assert t["attempts"][0].get("executor_version") == "v1", t["attempts"][0]
    assert len(t["attempts"][0].get("token_hash", "")) == 64, t["attempts"][0]
    assert t["attempts"][0]["result"] == {"done": True}, t["attempts"][0]
    show("short", s["id"])

    # A short failure, alike.
    f = await c.create_task(QUEUE, {"role": "fail"}, title="fail", retry={"max_attempts": 1})
    t = await wait_task(c, f["id"], "failed", lambda t: t["state"] == "failed")
    assert t["attempts"][0]["error"]["code"] == "nope", t["attempts"][0]
    show("fail", f["id"])

    # A long job claims at its first heartbeat, then heartbeats.
    g = await c.create_task(QUEUE, {"role": "long"}, title="long")
    t = await wait_task(c, g["id"], "accepted", lambda t: t["state"] == "accepted")
    assert len(t["attempts"]) == 1 and t["attempts"][0]["result"] == {"long": True}, t["attempts"]
    show("long", g["id"])

    # A checkpoint claims first.
    k = await c.create_task(QUEUE, {"role": "checkpoint"}, title="checkpoint")
    t = await wait_task(c, k["id"], "accepted", lambda t: t["state"] == "accepted")
    assert t.get("checkpoint") == {"step": 1}, t
    show("checkpoint", k["id"])

    # A wait claims first; the resumed attempt runs lazily.
    w = await c.create_task(QUEUE, {"role": "wait"}, title="wait")
    await wait_task(c, w["id"], "waiting", lambda t: t["state"] == "waiting")
    await c.signal(w["id"], "go", {"n": 1})
    t = await wait_task(c, w["id"], "accepted", lambda t: t["state"] == "accepted")
    assert [a["state"] for a in t["attempts"]] == ["parked", "succeeded"], t["attempts"]
    assert t["attempts"][1]["result"] == {"signal": {"n": 1}}, t["attempts"][1]
    show("wait", w["id"])

    # A task cancelled while its job runs unclaimed: the job is cancelled,
    # its report (which carries the claim) refused, no attempt recorded.
    x = await c.create_task(QUEUE, {"role": "cancel"}, title="cancel")
    await asyncio.wait_for(started["cancel"].wait(), 30)
    await c.cancel_task(x["id"])
    await wait_for("the cancelled job's cause", lambda: "cancel" in causes)
    assert causes["cancel"] == dwr.CAUSE_CANCELLED, causes
    await wait_for("the cancelled job's refusal", lambda: outcomes.seen("task %s attempt 1: refused" % x["id"]))
    t = await c.task(x["id"])
    assert t["state"] == "cancelled" and not t.get("attempts"), t
    show("cancel", x["id"])

    # Another claims the ready task while the job runs unclaimed: the job's
    # claim at its first heartbeat is refused and it is cancelled as a lost
    # attempt; it reports nothing.
    y = await c.create_task(QUEUE, {"role": "taken"}, title="taken")
    await asyncio.wait_for(started["taken"].wait(), 30)
    await other.command("task.claim", {"task_id": y["id"], "executor": "other"})
    await wait_for("the taken job's cause", lambda: "taken" in causes)
    assert causes["taken"] == dwr.CAUSE_LEASE_LOST, causes
    await wait_for("the taken job's refusal", lambda: outcomes.seen("task %s attempt 1: refused" % y["id"]))
    t = await c.task(y["id"])
    assert len(t["attempts"]) == 1 and t["attempts"][0]["executor"] == "other", t["attempts"]
    assert t["attempts"][0]["state"] == "running", t["attempts"]
    show("taken", y["id"])
    await c.cancel_task(y["id"])

    # A chain: its first task comes from the queue, the next two are handed
    # to this worker in the replies to the reports before them.
    attempts = await chain(c, "handed")
    assert [a.get("handed", False) for a in attempts] == [False, True, True], attempts
    assert all(a["executor"] == "py-lazy" for a in attempts), attempts

    worker.stop()
    await asyncio.wait_for(run, 30)

    # With no_handoff every task of a chain comes from the queue.
    pnc = await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"])
    plain = dwr.Worker(pnc, lease=LEASE, concurrency=1, executor="py-plain", no_handoff=True)
    plain.task(QUEUE)(handle)
    plain_run = asyncio.get_running_loop().create_task(plain.run())
    attempts = await chain(c, "fetched")
    assert not any(a.get("handed") for a in attempts), attempts
    assert all(a["executor"] == "py-plain" for a in attempts), attempts
    plain.stop()
    await asyncio.wait_for(plain_run, 30)

    # A job that never claimed, whose item was redelivered (its holder hung
    # past the lease): the new delivery claims first and runs the attempt;
    # the hung job's report, which carries its claim, is refused.
    # On a queue of its own: a pull that a stopped worker of QUEUE left
    # waiting in the server (its connection still open) would take the
    # item's first delivery, and the hung worker would get its second, and
    # claim first.
    snc = await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"])
    stale = dwr.Worker(snc, lease=LEASE, concurrency=1, executor="py-stale")
    stale_started, release = asyncio.Event(), asyncio.Event()

    @stale.task(HUNG_QUEUE)
    async def hang(job: dwr.Job) -> Any:
        stale_started.set()
        await release.wait()
        return {"by": "stale"}

    stale._pause_heartbeats = True  # as if its process hung: no renewal, no claim
    stale_run = asyncio.get_running_loop().create_task(stale.run())
    h = await c.create_task(HUNG_QUEUE, {"role": "hung"}, title="hung")
    await asyncio.wait_for(stale_started.wait(), 30)
    fnc = await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"])
    fresh = dwr.Worker(fnc, lease=LEASE, concurrency=1, executor="py-fresh")

    @fresh.task(HUNG_QUEUE)
    async def quick(job: dwr.Job) -> Any:
        return {"by": "fresh"}

    fresh_run = asyncio.get_running_loop().create_task(fresh.run())
    t = await wait_task(c, h["id"], "accepted", lambda t: t["state"] == "accepted")
    assert len(t["attempts"]) == 1 and t["attempts"][0]["executor"] == "py-fresh", t["attempts"]
    release.set()
    await wait_for("the stale report's refusal", lambda: outcomes.seen("task %s attempt 1: refused" % h["id"]))
    after = await c.task(h["id"])
    assert after["version"] == t["version"], (after["version"], t["version"])
    show("hung", h["id"])
    for wk, r in ((stale, stale_run), (fresh, fresh_run)):
        wk.stop()
        await asyncio.wait_for(r, 30)

    for conn in (nc, pnc, snc, fnc, other.nc):
        await conn.drain()
    await c.close()
    print("live lazy: ok", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
