"""dwr.Worker against a running dwr serve: run by go test -run TestPythonWorker
./integration/ (DWR_SERVER; DWR_CREDS a client's credential, to make the
work; DWR_EXECUTOR_CREDS an executor's of queue pyw). It checks what the
conformance scenarios do not: dependencies' results, a delegation and its
resumed attempt, an attempt's timeout as a cancellation, and a drain that
lets a running job report. Not a unittest module: it needs the service."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict

import dwr
from _live import wait_task

QUEUE = "pyw"


def result(t: Dict[str, Any]) -> Any:
    return t["attempts"][-1].get("result")


async def main() -> None:
    c = await dwr.Client.connect(os.environ["DWR_SERVER"], os.environ["DWR_CREDS"])
    nc = await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"])
    worker = dwr.Worker(nc, lease=3, concurrency=4, executor="py-live")
    seen: Dict[str, Any] = {}
    lingering = asyncio.Event()

    @worker.task(QUEUE)
    async def handle(job: dwr.Job) -> Any:
        role = job.input.get("role")
        if role == "child":
            return {"n": job.input["n"] * 10}
        if role == "dep":
            return {"from_a": job.dependencies["a"]["result"]}
        if role == "parent":
            d = await job.delegate("kids", title="children", tasks=[{"key": "k1", "queue": QUEUE,
                                                                       "input": {"role": "child", "n": 3}}],
                                   labels={"parent": job.task_id})
            return {"child": d.results["k1"]["result"], "attempt": job.attempt, "goal": d.goal_id}
        if role == "slow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen["slow"] = job.cancel_cause
                raise
        if role == "linger":
            lingering.set()
            await asyncio.sleep(0.5)
            return {"lingered": True}
        raise dwr.Permanent("unknown role %r" % role)

    run = asyncio.get_running_loop().create_task(worker.run())

    # A goal's plan: b depends on a, and is handed a's result.
    g = await c.create_goal("deps", tasks=[{"key": "a", "queue": QUEUE, "input": {"role": "child", "n": 2}},
                                           {"key": "b", "queue": QUEUE, "depends_on": ["a"], "input": {"role": "dep"}}])
    b = next(t["task_id"] for t in g["tasks"] if t["key"] == "b")
    t = await wait_task(c, b, "accepted", lambda t: t["state"] == "accepted")
    assert result(t) == {"from_a": {"n": 20}}, result(t)

    # A delegation: the attempt parks; the resumed one gets the child goal's results.
    p = await c.create_task(QUEUE, {"role": "parent"}, title="parent")
    t = await wait_task(c, p["id"], "accepted", lambda t: t["state"] in ("accepted", "failed"))
    assert t["state"] == "accepted", t
    assert result(t)["child"] == {"n": 30} and result(t)["attempt"] == 2, result(t)
    assert t["attempts"][0]["state"] == "parked", t["attempts"][0]
    assert t["delegations"][0]["goal_id"] == result(t)["goal"], t["delegations"]
    child = await c.goal(result(t)["goal"])
    assert child.get("labels") == {"parent": p["id"]}, child.get("labels")

    # A per-attempt timeout cancels the handler, cause "timeout"; the attempt fails with code timeout.
    s = await c.create_task(QUEUE, {"role": "slow"}, title="slow", timeout="700ms", retry={"max_attempts": 1})
    t = await wait_task(c, s["id"], "failed", lambda t: t["state"] == "failed")
    assert t["attempts"][0]["error"]["code"] == "timeout", t["attempts"][0]
    for _ in range(100):
        if "slow" in seen:
            break
        await asyncio.sleep(0.05)
    assert seen.get("slow") == "timeout", seen

    # A drain: stop() while a job runs; it still reports, then run returns.
    ln = await c.create_task(QUEUE, {"role": "linger"}, title="linger")
    await asyncio.wait_for(lingering.wait(), 30)
    worker.stop()
    await asyncio.wait_for(run, 20)
    t = await c.task(ln["id"])
    assert t["state"] == "accepted" and result(t) == {"lingered": True}, t

    await nc.drain()
    await c.close()
    print("live worker: ok")


if __name__ == "__main__":
    asyncio.run(main())
