"""The Python SDK's executor under dwr's conformance suite
(integration/conformance_test.go): ``python3 -m dwr.conformance`` serves one
queue with this package and does, for each task, what the scenario named in
the task's input asks (integration/conformance/conformance.go), as the Go
SDK's goexec does.

Environment (set by the suite): DWR_SERVER, DWR_CREDS, CONFORMANCE_QUEUE,
CONFORMANCE_ROLE (worker or verifier), CONFORMANCE_LEASE_MS,
CONFORMANCE_OBSERVE (a file to append observations to, one JSON object a
line) and CONFORMANCE_DIR (where the suite leaves release files).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Optional

from . import Check, Job, Permanent, Result, Verdict, Worker, connect

ROLE_WORKER = "worker"
ROLE_VERIFIER = "verifier"


class Env:
    """What the suite gives the executor, from the environment."""

    def __init__(self) -> None:
        e = os.environ
        self.server = e.get("DWR_SERVER", "")
        self.creds = e.get("DWR_CREDS", "")
        self.queue = e.get("CONFORMANCE_QUEUE", "")
        self.role = e.get("CONFORMANCE_ROLE") or ROLE_WORKER
        self.observations = e.get("CONFORMANCE_OBSERVE", "")
        self.dir = e.get("CONFORMANCE_DIR", "")
        try:
            self.lease = int(e.get("CONFORMANCE_LEASE_MS", "")) / 1000
        except ValueError:
            raise SystemExit("conformance: CONFORMANCE_LEASE_MS: not a number of milliseconds") from None
        for name, v in (("DWR_SERVER", self.server), ("DWR_CREDS", self.creds), ("CONFORMANCE_QUEUE", self.queue),
                        ("CONFORMANCE_OBSERVE", self.observations), ("CONFORMANCE_DIR", self.dir)):
            if not v:
                raise SystemExit("conformance: %s is not set" % name)

    def observe(self, task_id: str, attempt: int, event: str, detail: Any = None) -> None:
        """Appends an observation (one write of one line)."""
        o: Dict[str, Any] = {"task_id": task_id, "attempt": attempt, "event": event}
        if detail is not None:
            o["detail"] = detail
        fd = os.open(self.observations, os.O_APPEND | os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            os.write(fd, (json.dumps(o) + "\n").encode())
        finally:
            os.close(fd)

    def released(self, task_id: str) -> bool:
        return os.path.exists(os.path.join(self.dir, "release-" + task_id))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def handler(env: Env):  # noqa: ANN201 - a decorated coroutine function
    async def handle(job: Job) -> Any:
        inp = job.input if isinstance(job.input, dict) else {}
        scenario = inp.get("scenario")

        def observe(event: str, detail: Any = None) -> None:
            env.observe(job.task_id, job.attempt, event, detail)

        done: Dict[str, Any] = {"attempt": job.attempt, "operation_key": job.operation_key}
        if scenario == "succeed":
            done["value"] = inp.get("value")
            return done

        if scenario == "retry":
            if job.attempt <= int(inp.get("fail_times") or 0):
                raise RuntimeError("transient failure %d" % job.attempt)
            return done

        if scenario == "permanent":
            raise Permanent(inp.get("message") or "")

        if scenario == "outlive_lease":
            await asyncio.sleep(int(inp.get("millis") or 0) / 1000)
            return done

        if scenario == "checkpoint_resume":
            if job.checkpoint is not None:
                done["resumed_from"] = job.checkpoint
                return done
            await job.save_checkpoint({"step": 1, "attempt": job.attempt})
            observe("started")
            await asyncio.Event().wait()  # the suite kills the process here

        if scenario == "fencing":
            # A checkpoint first: the attempt is claimed, its token is what
            # a later report carries.
            await job.save_checkpoint({"holder": job.attempt})
            observe("started")
            try:
                while not env.released(job.task_id):
                    await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                observe("stopped", job.cancel_cause)
                raise
            observe("released")
            return done

        if scenario == "cancel":
            await job.save_checkpoint({"running": job.attempt})
            observe("started")
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                observe("stopped", job.cancel_cause)
                raise

        if scenario == "sleep":
            if job.checkpoint is None:
                until = datetime.now(timezone.utc) + timedelta(milliseconds=int(inp.get("millis") or 0))
                await job.save_checkpoint({"until": until.isoformat().replace("+00:00", "Z")})
                raise job.sleep(until)
            done["woke_at"] = _now()
            return done

        if scenario == "signal":
            if job.signal is None:
                raise job.await_signal(inp.get("name") or "")
            done["signal"] = job.signal.payload
            return done

        if scenario == "approval":
            d = await job.request_approval(inp.get("action"), summary="conformance", role=inp.get("role") or "")
            done.update(response=d.response, approver=d.approver, action_digest=d.action_digest)
            return done

        if scenario in ("four_eyes", "not_by_requester"):
            d = await job.request_approval(inp.get("action"), summary="conformance: four eyes", role=inp.get("role") or "",
                                           quorum=int(inp.get("quorum") or 0),
                                           exclude_requester=bool(inp.get("exclude_requester")))
            if not d.approved:
                raise Permanent("%s: %s" % (inp.get("role"), d.response))
            done.update(approvers=d.approvers, approver=d.approver)
            return done

        if scenario == "two_approvals":
            by = []
            for role in inp.get("roles") or []:
                d = await job.request_approval(inp.get("action"), summary="conformance: " + role, role=role)
                if not d.approved:
                    raise Permanent("%s: %s" % (role, d.response))
                by.append(d.approver)
            done["approvers"] = by
            return done

        if scenario == "artifact":
            a = await job.put_artifact(inp.get("name") or "artifact", (inp.get("content") or "").encode())
            return Result(done, artifacts=[a])

        if scenario == "model_step":
            job.record_model_step(inp.get("model") or "", prompt_version=inp.get("prompt_version") or "",
                                  tokens=int(inp.get("tokens") or 0))
            return done

        if scenario == "verified":
            done["verdicts"] = inp.get("verdicts")
            return done

        raise Permanent("unknown scenario %r" % scenario)

    return handle


async def verify(c: Check) -> Verdict:
    """Judges a result by the verdict it carries for its attempt."""
    res = c.result if isinstance(c.result, dict) else {}
    attempt = int(res.get("attempt") or 0)
    verdicts = res.get("verdicts") or []
    outcome = verdicts[attempt - 1] if 1 <= attempt <= len(verdicts) else "PASS"
    return Verdict(outcome, evidence={"checked": str(attempt)})


async def main() -> None:
    env = Env()
    nc = await connect(env.server, env.creds, name="pyexec")
    # A drain shorter than the suite's 20 s wait for a stopped executor.
    w = Worker(nc, lease=env.lease, executor="pyexec", concurrency=4, drain_timeout=10)
    if env.role == ROLE_VERIFIER:
        w.verifier(env.queue)(verify)
    else:
        w.task(env.queue)(handler(env))
    loop = asyncio.get_running_loop()
    def stop() -> None:
        logging.getLogger("dwr.conformance").info("stopping: draining the running jobs")
        w.stop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop)
    try:
        await w.run()
    finally:
        await nc.drain()


def run(argv: Optional[list] = None) -> None:
    logging.basicConfig(level=os.environ.get("DWR_LOG_LEVEL", "INFO"), stream=sys.stderr,
                        format="pyexec %(process)d %(asctime)s %(levelname)s %(message)s")
    asyncio.run(main())


if __name__ == "__main__":
    run()
