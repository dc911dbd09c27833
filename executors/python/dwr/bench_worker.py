"""The Python SDK's worker under `dwr bench chain3 --worker-sdk python`
(integration/bench): ``python3 -m dwr.bench_worker`` serves the benchmark's
queue with the handler the Go workers run there — it returns {"ok": true} —
until SIGTERM, then drains.

Environment (set by the benchmark): DWR_SERVER, DWR_CREDS (none when the
service is open), BENCH_QUEUE, BENCH_CONCURRENCY (jobs at once) and
BENCH_EXECUTOR (the executor's name); with BENCH_CPROFILE=PREFIX it runs
under cProfile and writes its profile to PREFIX.PID when it stops. It writes the line "ready" to stdout
once the worker takes work from the queue (the SDK's "taking work" log), so
that the benchmark measures nothing of its start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

from . import Job, Worker, connect

# What the Go workers' handler returns (integration/bench/chain.go).
OUTPUT = {"ok": True}


class _Ready(logging.Handler):
    """Writes "ready" to stdout at the worker's first "taking work" log."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.said = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.said and record.getMessage().startswith("dwr: taking work from queue"):
            self.said = True
            sys.stdout.write("ready\n")
            sys.stdout.flush()
            # No more INFO records (one a job): they would be made for
            # nothing, and measured.
            logging.getLogger("dwr.worker").setLevel(logging.WARNING)


def _env_int(name: str) -> int:
    v = os.environ.get(name, "")
    try:
        return int(v)
    except ValueError:
        raise SystemExit("bench_worker: %s: %r is not a whole number" % (name, v)) from None


async def main() -> None:
    queue = os.environ.get("BENCH_QUEUE", "")
    executor = os.environ.get("BENCH_EXECUTOR", "")
    if not queue or not executor:
        raise SystemExit("bench_worker: BENCH_QUEUE and BENCH_EXECUTOR must be set")
    concurrency = _env_int("BENCH_CONCURRENCY")
    nc = await connect(name=executor)  # DWR_SERVER, DWR_CREDS
    w = Worker(nc, executor=executor, concurrency=concurrency, drain_timeout=1)

    @w.task(queue)
    async def handle(job: Job) -> Any:
        return OUTPUT

    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, w.stop)
    try:
        await w.run()
    finally:
        await nc.drain()


def run() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="pybench %(process)d %(asctime)s %(levelname)s %(message)s")
    ready = _Ready()
    worker_log = logging.getLogger("dwr.worker")
    worker_log.setLevel(logging.INFO)  # for the "taking work" line; others print at WARNING and above
    worker_log.addHandler(ready)
    worker_log.propagate = False
    errors = logging.StreamHandler(sys.stderr)
    errors.setLevel(logging.WARNING)
    errors.setFormatter(logging.Formatter("pybench %(process)d %(asctime)s %(levelname)s %(message)s"))
    worker_log.addHandler(errors)
    profile = os.environ.get("BENCH_CPROFILE", "")
    if not profile:
        asyncio.run(main())
        return
    import cProfile

    with cProfile.Profile() as p:
        try:
            asyncio.run(main())
        finally:
            p.dump_stats("%s.%d" % (profile, os.getpid()))


if __name__ == "__main__":
    run()
