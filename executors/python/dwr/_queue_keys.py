"""Work items the worker opens itself, as the Go SDK does
(executors/queue_keys.go).

With encryption on, the service seals an execute item's payloads (its
task's input, results, checkpoint, its dependencies' results) with its
queue's key of the day, a verify item's (the input and the result it
judges, earlier attempts, verifications) with its verification queue's,
and the worker reads that key once a day with the
queue.key query (only the queue's executors may), opening each item in
memory: the job runs on the item alone, as with encryption off, instead of
reading its task and each dependency again with task.get. An item that also
carries payloads sealed with another key (a goal's own, which can be
shredded alone), or whose key cannot be read (a service that does not hand
queue keys, a shredded workspace), runs as before: from task.get.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from typing import TYPE_CHECKING, Dict, Optional

from ._seal import DataKey, SealError, open_all, parse_queue_scope, scopes
from .errors import DwrError

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("dwr.worker")

# How long (seconds) a key the service did not hand is not asked for again:
# items run from task.get meanwhile.
QUEUE_KEY_RETRY = 60.0


class QueueKeys:
    """A worker's keys of one queue, by epoch: read once each, one read at a
    time (the others wait for it); a refusal is remembered for
    QUEUE_KEY_RETRY."""

    def __init__(self, client: "Client", workspace: str, queue: str) -> None:
        self.client = client
        self.workspace = workspace
        self.queue = queue
        self.keys: Dict[int, DataKey] = {}
        self.failed: Dict[int, float] = {}  # epochs whose key was not handed, and when (monotonic)
        self._lock = asyncio.Lock()

    async def open_item(self, data: bytes) -> Optional[bytes]:
        """data, an item of the queue (execute, or verify on a verification
        queue), with its sealed payloads opened; None when it holds one the
        worker cannot open itself. The caller checks the opened item."""
        epochs: Dict[str, int] = {}
        for scope in scopes(data):
            epoch = parse_queue_scope(scope)
            if epoch is None:
                return None  # not the queue's key alone: no key is read for it
            epochs[scope] = epoch
        keys: Dict[str, DataKey] = {}
        for scope, epoch in epochs.items():
            try:
                keys[scope] = await self.key(epoch)
            except (DwrError, ValueError) as e:
                log.debug("dwr: an item's queue key cannot be read (%s); reading its task instead", e)
                return None
        try:
            return open_all(data, self.workspace, keys.__getitem__)
        except (SealError, KeyError) as e:
            log.warning("dwr: a work item of queue %s does not open with its queue key (%s); reading its task instead",
                        self.queue, e)
            return None

    async def key(self, epoch: int) -> DataKey:
        """The queue's key of epoch: from memory, or read with queue.key."""
        async with self._lock:
            k = self.keys.get(epoch)
            if k is not None:
                return k
            at = self.failed.get(epoch)
            if at is not None and time.monotonic() - at < QUEUE_KEY_RETRY:
                raise ValueError("the queue key was not handed a moment ago")
            try:
                k = await self._read(epoch)
            except (DwrError, ValueError):
                self.failed[epoch] = time.monotonic()
                raise
            self.failed.pop(epoch, None)
            for e in [e for e in self.keys if e < epoch - 1]:  # a day's items are not sealed with an older day's key
                del self.keys[e]
            self.keys[epoch] = k
            return k

    async def _read(self, epoch: int) -> DataKey:
        r = await self.client.query("queue.key", {"queue": self.queue, "epoch": epoch}, retry_for=None)
        if not isinstance(r, dict) or r.get("queue") != self.queue or r.get("epoch") != epoch or not isinstance(r.get("key"), str):
            raise ValueError("queue.key answered another key")
        k = r["key"]
        try:
            raw = base64.urlsafe_b64decode(k + "=" * (-len(k) % 4))
        except (binascii.Error, ValueError):
            raise ValueError("queue.key answered a key that is not base64url") from None
        return DataKey(raw)
