"""Unit tests of the handoff (README "Executors: the protocol", step 6; the
Go SDK's executors/handoff.go), on a scripted service: a report asks for
the next attempt (``next: true``), and an attempt its reply hands runs at
once in the same slot, claimed already — no claim, no work item to
acknowledge, its lease kept by heartbeats with the handed token — and its
own report asks again, down the chain. No report asks while the worker
stops, for a verifier, for an item it could not open, or with no_handoff."""

from __future__ import annotations

import asyncio
import copy
import json
import time
import unittest
from typing import Any, Callable, Dict, List, Optional, Tuple

import dwr
from dwr import _nats
from dwr.errors import DwrError
from dwr.worker import SEALED_PREFIX, _Delivery

QUEUE = "q"
LEASE = 0.3  # heartbeats every 0.1 s
A, B, C = "01Q3G99648H87N2YG8NR952XA0", "01Q3G99648H87N2YG8NR952XB0", "01Q3G99648H87N2YG8NR952XC0"
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _task(tid: str, state: str, attempts: List[Dict[str, Any]], deps: Tuple[str, ...] = ()) -> Dict[str, Any]:
    return {"id": tid, "workspace": "default", "key": tid[-2:].lower(), "state": state,
            "spec": {"queue": QUEUE, "input": {"key": tid[-2:].lower()}}, "depends_on": list(deps), "attempts": attempts}


def _item(tid: str, task: Optional[Dict[str, Any]], deps: Tuple[str, ...] = ()) -> Dict[str, Any]:
    return {"kind": "execute", "task_id": tid, "workspace": "default", "queue": QUEUE, "attempt": 1,
            "operation_key": "op-" + tid, "task": task,
            "dependencies": [{"key": d[-2:].lower(), "task_id": d, "result": d[-2:].lower()} for d in deps], "seq": 7}


def handoff(tid: str, dep: str, token: str) -> Dict[str, Any]:
    """result.next of a report that was handed attempt 1 of task tid (which
    depends on dep), running for this worker."""
    running = {"n": 1, "state": "running", "executor": "py", "operation_key": "op-" + tid, "handed": True}
    return {"task_id": tid, "attempt": 1, "token_hash": "h-" + token, "token": token,
            "item": _item(tid, _task(tid, "running", [running], (dep,)), (dep,))}


class _Service:
    """The service and the bus as one worker sees them: every command and
    query is recorded and answered by answer(name, body) (a value, or a
    DwrError to raise); every publish (an item's ack, nak, in-progress) is
    recorded. ``beaten`` is set at the first task.heartbeat."""

    def __init__(self, answer: Callable[[str, Dict[str, Any]], Any]) -> None:
        self.answer = answer
        self.sent: List[Tuple[str, Dict[str, Any], Dict[str, Any]]] = []
        self.published: List[Tuple[str, bytes]] = []
        self.beaten = asyncio.Event()

    # dwr.Client
    async def command(self, name: str, body: Any = None, **kwargs: Any) -> Any:
        self.sent.append((name, copy.deepcopy(body), kwargs))
        if name == "task.heartbeat":
            self.beaten.set()
            return {}
        r = self.answer(name, body)
        if isinstance(r, DwrError):
            raise r
        return r

    async def query(self, name: str, body: Any = None, **kwargs: Any) -> Any:
        return await self.command(name, body, **kwargs)

    # _nats.Client
    async def publish(self, subject: str, payload: bytes = b"", reply: str = "", headers: Any = None) -> None:
        self.published.append((subject, payload))

    def names(self, *skip: str) -> List[str]:
        return [n for n, _, _ in self.sent if n not in skip]

    def bodies(self, name: str) -> List[Dict[str, Any]]:
        return [b for n, b, _ in self.sent if n == name]


def _msg(item: Dict[str, Any], *, data: Optional[bytes] = None) -> _nats.Msg:
    """A first delivery of item, just published: its job may start before
    its claim (the lazy claim)."""
    reply = "$JS.ACK.DWR_WORK.dwr-default-q.1.5.5.%d.0" % time.time_ns()
    return _nats.Msg(subject="dwr.work.default.q", reply=reply, data=data or json.dumps(item).encode(),
                     headers={"traceparent": TP})


class HandoffTest(unittest.IsolatedAsyncioTestCase):
    def worker(self, svc: _Service, fn: Any, **opts: Any) -> dwr.Worker:
        w = dwr.Worker(_nats.Client(), executor="py", **opts)
        w.nc = svc  # type: ignore[assignment]
        w.client = svc  # type: ignore[assignment]
        w.task(QUEUE)(fn)
        return w

    async def deliver(self, w: dwr.Worker, msg: _nats.Msg) -> None:
        """Runs one delivery as the worker's fetch loop does, in one slot,
        and checks the slot is free again after it (and its handoffs)."""
        slots = asyncio.Semaphore(1)
        await slots.acquire()
        d = _Delivery(w, msg, QUEUE, LEASE, "execute", w._handlers[QUEUE][1])
        await asyncio.wait_for(w._deliver(d, slots), 10)
        self.assertFalse(slots.locked(), "the slot is released once the chain ended")

    def acks(self, svc: _Service) -> List[bytes]:
        return [p for _, p in svc.published if p != b"+WPI"]

    async def test_a_chain_runs_on_the_attempts_its_reports_are_handed(self) -> None:
        ran: List[Tuple[str, int, Any]] = []

        def answer(name: str, body: Dict[str, Any]) -> Any:
            if name == "task.succeed" and body["task_id"] == A:
                return {"task_id": A, "attempt": 1, "state": "succeeded", "next": handoff(B, A, "tok-b")}
            if name == "task.succeed" and body["task_id"] == B:
                return {"task_id": B, "attempt": 1, "state": "succeeded", "next": handoff(C, B, "tok-c")}
            if name == "task.succeed" and body["task_id"] == C:
                return {"task_id": C, "attempt": 1, "state": "succeeded"}
            raise AssertionError("unexpected %s %s" % (name, body))
        svc = _Service(answer)

        async def handle(job: dwr.Job) -> Any:
            ran.append((job.task_id, job.attempt, {k: d["result"] for k, d in job.dependencies.items()}))
            if job.task_id == B:
                # Long enough to heartbeat: a handed attempt's lease is
                # kept by its heartbeats alone.
                await asyncio.wait_for(svc.beaten.wait(), 5)
            return job.key

        w = self.worker(svc, handle)
        await self.deliver(w, _msg(_item(A, _task(A, "ready", []))))

        self.assertEqual([(A, 1, {}), (B, 1, {"a0": "a0"}), (C, 1, {"b0": "b0"})], ran,
                         "each handed attempt ran, with its dependency's result from its item")
        self.assertNotIn("task.claim", svc.names(), "a handed attempt is claimed already")
        self.assertEqual([b"+ACK"], self.acks(svc), "the one work item is acknowledged; a handed attempt has none")
        succeeded = svc.bodies("task.succeed")
        self.assertEqual([A, B, C], [b["task_id"] for b in succeeded])
        self.assertTrue(all(b.get("next") is True for b in succeeded), "every report asks for the next: %s" % succeeded)
        self.assertIn("claim", succeeded[0], "the fetched job claimed lazily, in its report")
        self.assertEqual(("tok-b", "tok-c"), (succeeded[1].get("token"), succeeded[2].get("token")),
                         "a handed attempt reports with its handed token")
        self.assertNotIn("claim", succeeded[1])
        beats = svc.bodies("task.heartbeat")
        self.assertTrue(beats, "the handed attempt heartbeats")
        self.assertTrue(all(b == {"task_id": B, "attempt": 1, "token": "tok-b"} for b in beats), beats)
        last_beat = max(i for i, (n, _, _) in enumerate(svc.sent) if n == "task.heartbeat")
        b_report = next(i for i, (n, b, _) in enumerate(svc.sent) if n == "task.succeed" and b["task_id"] == B)
        self.assertLess(last_beat, b_report, "no heartbeat after the attempt's report")
        self.assertTrue(all(kw.get("traceparent") == TP for _, _, kw in svc.sent),
                        "the handed jobs' commands stay in the item's trace")
        self.assertEqual({}, w._watches, "no task is watched once the chain ended")

    async def test_a_failure_asks_too_and_a_reply_without_token_or_item_hands_nothing(self) -> None:
        for name, nxt in (("no token", dict(handoff(B, A, "tok-b"), token="")),
                          ("no item", {k: v for k, v in handoff(B, A, "tok-b").items() if k != "item"}),
                          ("no next", None)):
            with self.subTest(name):
                svc = _Service(lambda n, b: {"task_id": A, "attempt": 1, "state": "ready", "next": nxt})
                ran: List[str] = []

                async def fail(job: dwr.Job) -> Any:
                    ran.append(job.task_id)
                    raise RuntimeError("again")

                w = self.worker(svc, fail)
                await self.deliver(w, _msg(_item(A, _task(A, "ready", []))))
                self.assertEqual([A], ran, "nothing was handed")
                self.assertEqual(["task.fail"], svc.names())
                self.assertIs(True, svc.bodies("task.fail")[0].get("next"), "a failure asks for the next too")
                self.assertEqual([b"+ACK"], self.acks(svc))

    async def test_a_handed_attempt_whose_lease_the_service_took_is_cancelled(self) -> None:
        started = asyncio.Event()
        causes: List[Optional[str]] = []

        def answer(name: str, body: Dict[str, Any]) -> Any:
            if name == "task.succeed":
                return {"task_id": A, "attempt": 1, "state": "succeeded", "next": handoff(B, A, "tok-b")}
            if name == "task.fail":
                return DwrError("conflict", "attempt 1 no longer holds the task",
                                [{"pointer": "/attempt", "message": "not running"}])
            if name == "task.get":
                return _task(B, "ready", [{"n": 1, "state": "abandoned", "reason": "lease_lost"}], (A,))
            raise AssertionError("unexpected %s %s" % (name, body))
        svc = _Service(answer)

        async def handle(job: dwr.Job) -> Any:
            if job.task_id == B:
                started.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    causes.append(job.cancel_cause)
                    raise
            return job.key

        w = self.worker(svc, handle)
        with self.assertLogs("dwr.worker", "INFO") as logs:
            run = asyncio.get_running_loop().create_task(self.deliver(w, _msg(_item(A, _task(A, "ready", [])))))
            await asyncio.wait_for(started.wait(), 5)
            # The service abandons the silent attempt: its event reaches the job.
            ev = w._event_cb("dwr.ev.default.task.", "attempt_abandoned")
            await ev(_nats.Msg(subject="dwr.ev.default.task.%s.attempt_abandoned" % B, data=b'{"data":{"attempt":1}}'))
            await asyncio.wait_for(run, 10)
        self.assertIn("task %s attempt 1: refused" % B, "\n".join(logs.output))
        self.assertEqual([dwr.CAUSE_LEASE_LOST], causes)
        fail = svc.bodies("task.fail")
        self.assertEqual(1, len(fail))
        self.assertEqual(("tok-b", "lease_lost"), (fail[0]["token"], fail[0]["error"]["code"]))
        self.assertEqual([b"+ACK"], self.acks(svc), "the refused handed attempt has no item to settle")

    async def test_a_handed_attempt_this_worker_cannot_run_is_left_to_lapse(self) -> None:
        other = handoff(B, A, "tok-b")
        other["item"]["queue"] = "other"
        for name, h in (("another queue", other),
                        ("another attempt", dict(handoff(B, A, "tok-b"), attempt=2)),
                        ("not running", dict(handoff(B, A, "tok-b"), item=_item(B, _task(B, "ready", []))))):
            with self.subTest(name):
                svc = _Service(lambda n, b: {"task_id": A, "attempt": 1, "state": "succeeded", "next": h})
                ran: List[str] = []

                async def handle(job: dwr.Job) -> Any:
                    ran.append(job.task_id)
                    return None

                w = self.worker(svc, handle)
                with self.assertLogs("dwr.worker", "ERROR") as logs:
                    await self.deliver(w, _msg(_item(A, _task(A, "ready", []))))
                self.assertEqual([A], ran)
                self.assertEqual(["task.succeed"], svc.names(), "nothing is sent for it: its lease lapses")
                self.assertIn("a handed attempt this worker cannot run", "\n".join(logs.output))

    async def test_no_report_asks_while_the_worker_stops_or_with_no_handoff(self) -> None:
        for name, opts, stop in (("stopping", {}, True), ("no_handoff", {"no_handoff": True}, False)):
            with self.subTest(name):
                # A service that hands the next attempt when asked.
                svc = _Service(lambda n, b: {"task_id": A, "attempt": 1, "state": "succeeded",
                                             "next": handoff(B, A, "tok-b") if b.get("next") else None})
                ran: List[str] = []

                async def handle(job: dwr.Job) -> Any:
                    ran.append(job.task_id)
                    if stop:
                        w.stop()  # the worker starts draining while the job runs
                    return None

                w = self.worker(svc, handle, **opts)
                await self.deliver(w, _msg(_item(A, _task(A, "ready", []))))
                self.assertEqual([A], ran)
                self.assertEqual(1, len(svc.bodies("task.succeed")))
                self.assertNotIn("next", svc.bodies("task.succeed")[0])

    async def test_an_item_it_could_not_open_asks_too(self) -> None:
        """An item with a sealed payload the worker cannot open runs on the
        task read opened from the service, and its report asks for the
        handoff all the same: the service hands the item opened, as it
        answers a claim's task. Its job still claims lazily at its first
        command (the item's being sealed is not its report's carrying the
        claim)."""
        def answer(name: str, body: Dict[str, Any]) -> Any:
            if name == "queue.key":
                return DwrError("forbidden", "not an executor of the queue")
            if name == "task.get":
                return _task(A, "ready", [])
            if name == "task.claim":
                return {"task_id": A, "attempt": 1, "state": "running", "token": "tok-a"}
            return {"task_id": A, "attempt": 1, "state": "succeeded"}
        svc = _Service(answer)
        seen: List[Any] = []

        async def handle(job: dwr.Job) -> Any:
            seen.append(job.input)
            await job.save_checkpoint({"step": 1})
            return None

        w = self.worker(svc, handle)
        it = _item(A, _task(A, "ready", []))
        raw = json.dumps(it).replace('{"key": "a0"}', json.dumps((SEALED_PREFIX + b"q.1:xyz").decode())).encode()
        self.assertIn(SEALED_PREFIX, raw)
        await self.deliver(w, _msg(it, data=raw))
        self.assertEqual([{"key": "a0"}], seen, "the job ran on the task read opened from the service")
        self.assertEqual(["task.claim", "task.checkpoint", "task.succeed"], svc.names("queue.key", "task.get"))
        succeeded = svc.bodies("task.succeed")[0]
        self.assertIs(True, succeeded.get("next"))
        self.assertEqual("tok-a", succeeded.get("token"))

    async def test_a_verifier_asks_for_nothing(self) -> None:
        svc = _Service(lambda n, b: {})
        w = dwr.Worker(_nats.Client(), executor="py")
        w.nc = w.client = svc  # type: ignore[assignment]

        @w.verifier(QUEUE)
        async def judge(c: dwr.Check) -> dwr.Verdict:
            return dwr.Verdict(dwr.PASS)

        item = {"kind": "verify", "task_id": A, "workspace": "default", "queue": QUEUE, "attempt": 1,
                "operation_key": "op", "result_digest": "sha256:00"}
        d = _Delivery(w, _msg(item), QUEUE, LEASE, "verify", judge)
        self.assertFalse(d.ask_next())
        slots = asyncio.Semaphore(1)
        await slots.acquire()
        await asyncio.wait_for(w._deliver(d, slots), 10)
        self.assertEqual(["task.verify"], svc.names())
        self.assertNotIn("next", svc.bodies("task.verify")[0])


if __name__ == "__main__":
    unittest.main()
