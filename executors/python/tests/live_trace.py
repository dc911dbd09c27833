"""Trace propagation of dwr.Client and dwr.Worker against a running dwr
service that traces: run by go test -run TestPythonJobCommandsCarryTheTrace
./integration/ (DWR_SERVER; DWR_CREDS a client's credential;
DWR_EXECUTOR_CREDS an executor's of queue pyt; TRACEPARENT the trace the
first client takes from its environment; TRACE_EXPLICIT the one the second
is given). Each task prints "task <scenario> <task id>" for the Go test,
which checks the headers of the commands and the service's spans. Not a
unittest module: it needs the service."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict

import dwr
from _live import wait_task

QUEUE = "pyt"


def trace_id(tp: str) -> str:
    return tp.split("-")[1] if tp else ""


async def main() -> None:
    env_tp, explicit = os.environ["TRACEPARENT"], os.environ["TRACE_EXPLICIT"]
    c = await dwr.Client.connect(os.environ["DWR_SERVER"], os.environ["DWR_CREDS"])  # TRACEPARENT
    assert c.traceparent == env_tp, c.traceparent
    c2 = dwr.Client(c.nc, traceparent=explicit)
    nc = await dwr.connect(os.environ["DWR_SERVER"], os.environ["DWR_EXECUTOR_CREDS"])
    worker = dwr.Worker(nc, lease=1.0, executor="py-trace")
    seen: Dict[str, str] = {}

    @worker.task(QUEUE)
    async def handle(job: dwr.Job) -> Any:
        seen[job.task_id] = job.traceparent
        if job.input.get("long"):
            await asyncio.sleep(0.8)  # past two heartbeats (lease/3): it claims at the first
        await job.save_checkpoint({"step": 1})
        return {"traceparent": job.traceparent}

    run = asyncio.get_running_loop().create_task(worker.run())
    for name, client, tp, long in (("env", c, env_tp, False), ("explicit", c2, explicit, True)):
        t = await client.create_task(QUEUE, {"long": long}, title=name)
        # Read by the client that created it: its reads carry the sequence
        # its create was answered with (another client's may not see it yet).
        await wait_task(client, t["id"], "accepted", lambda t: t["state"] == "accepted")
        got = seen[t["id"]]
        assert dwr.client.valid_traceparent(got), got
        assert trace_id(got) == trace_id(tp), (name, got, tp)
        print("task %s %s" % (name, t["id"]), flush=True)

    worker.stop()
    await asyncio.wait_for(run, 30)
    await nc.drain()
    await c.close()
    print("live trace: ok", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
