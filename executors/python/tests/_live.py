"""What the live_*.py programs share (they run against a real dwr serve, started
by the Go tests of integration/; not a unittest module)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict

import dwr


async def wait_task(c: dwr.Client, task_id: str, what: str, cond: Callable[[Dict[str, Any]], bool]) -> Dict[str, Any]:
    """Reads the task until cond holds for it, for up to 30 s."""
    deadline = time.monotonic() + 30
    t: Dict[str, Any] = {}
    while time.monotonic() < deadline:
        t = await c.task(task_id)
        if cond(t):
            return t
        await asyncio.sleep(0.05)
    raise AssertionError("task %s: %s: not within 30 s; it is %s" % (task_id, what, t.get("state")))
