"""dwr.Worker opens its queue's sealed work items itself, against a running
dwr serve with encryption on: run by go test -run
TestPythonWorkersOpenTheirQueuesSealedItems ./integration/ (DWR_SERVER;
DWR_CREDS a client's credential; DWR_EXECUTOR_CREDS an executor's of
queues pys and pysc). It runs a chain of three tasks whose handler needs its
input and its dependencies' results opened, the second judged on pysc by a
verifier that fails it unless it saw its input and result opened, then the
same chain in a goal with its own key, and prints "chain <label> <task ids>"
for the Go test, which counts the queries on the bus. Not a unittest module:
it needs the service."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Dict, List, Optional

import dwr

QUEUE = "pys"
CHECKS = "pysc"


async def wait_accepted(c: dwr.Client, task_id: str) -> Dict[str, Any]:
    deadline = time.monotonic() + 30
    t: Dict[str, Any] = {}
    while time.monotonic() < deadline:
        t = await c.task(task_id)
        if t.get("state") in ("accepted", "failed", "rejected", "cancelled"):
            return t
        await asyncio.sleep(0.05)
    raise AssertionError("task %s: not accepted within 30 s; it is %s" % (task_id, t.get("state")))


async def chain(c: dwr.Client, label: str, privacy: Optional[Dict[str, Any]]) -> None:
    tasks: List[Dict[str, Any]] = [
        {"key": "a", "queue": QUEUE, "input": {"secret": "secret-a"}},
        {"key": "b", "queue": QUEUE, "depends_on": ["a"], "input": {"secret": "secret-b"},
         "verification": {"queue": CHECKS}},
        {"key": "c", "queue": QUEUE, "depends_on": ["b"], "input": {"secret": "secret-c"}},
    ]
    fields: Dict[str, Any] = {"envelope": {"privacy": privacy}} if privacy else {}
    g = await c.create_goal("sealed " + label, tasks=tasks, **fields)
    ids = [t["task_id"] for t in g["tasks"]]
    done = await wait_accepted(c, ids[2])
    last = (done.get("attempts") or [{}])[-1]
    assert done["state"] == "accepted", "%s: task c is %s: %s" % (label, done["state"], last.get("failure"))
    assert last.get("result") == "secret-c+secret-b+secret-a", "%s: %r" % (label, last.get("result"))
    print("chain %s %s" % (label, " ".join(ids)), flush=True)


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    c = await dwr.Client.connect(os.environ["DWR_SERVER"], os.environ["DWR_CREDS"])
    nc = await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"])
    worker = dwr.Worker(nc, lease=10, concurrency=2, executor="py-sealed", version="v1")

    @worker.task(QUEUE)
    async def handle(job: dwr.Job) -> Any:
        secret = job.input.get("secret") if isinstance(job.input, dict) else None
        if not isinstance(secret, str) or not secret.startswith("secret-"):
            raise dwr.Permanent("not_opened", "the input is not opened: %r" % (job.input,))
        out = secret
        for d in job.dependencies.values():
            if not isinstance(d.get("result"), str) or not d["result"].startswith("secret-"):
                raise dwr.Permanent("not_opened", "a dependency's result is not opened: %r" % (d.get("result"),))
            out += "+" + d["result"]
        return out

    @worker.verifier(CHECKS)
    async def judge(check: dwr.Check) -> dwr.Verdict:
        # Task b's input and result, opened (a sealed value fails it).
        if check.result != "secret-b+secret-a" or not isinstance(check.input, dict) or check.input.get("secret") != "secret-b":
            return dwr.Verdict(dwr.FAIL, evidence={"input": check.input, "result": check.result})
        return dwr.Verdict(dwr.PASS)

    run = asyncio.get_running_loop().create_task(worker.run())
    try:
        await chain(c, "queue", None)
        await chain(c, "goal", {"key": "goal"})
    finally:
        worker.stop()
        await run
    print("live sealed: ok", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
