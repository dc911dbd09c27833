"""Unit tests of the worker's parts that need no server."""

from __future__ import annotations

import asyncio
import copy
import os
import time
import unittest
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Tuple
from unittest import mock

import dwr
from dwr import _nats
from dwr._lazy_claim import LAZY_MAX_AGE, LazyClaim, lazy_item
from dwr.client import Client, trace_headers, valid_traceparent
from dwr.errors import DwrError
from dwr.worker import Job, _attempt_count, _decisions_of, _item_trace, _rfc3339

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class WorkerConfigTest(unittest.TestCase):
    def test_every_problem_is_named(self) -> None:
        with self.assertRaises(ValueError) as cm:
            dwr.Worker(_nats.Client(), workspace="Bad WS", lease=0.1, concurrency=0, max_deliver=0)
        msg = str(cm.exception)
        for part in ("workspace 'Bad WS'", "concurrency 0", "lease 0.1s", "max_deliver 0"):
            self.assertIn(part, msg)

    def test_a_handler_is_async_and_one_per_queue(self) -> None:
        w = dwr.Worker(_nats.Client())
        with self.assertRaises(TypeError):
            w.task("q")(lambda job: None)

        @w.task("q")
        async def h(job: dwr.Job) -> None:
            return None
        with self.assertRaisesRegex(ValueError, "has a handler already"):
            w.verifier("q")(h)
        with self.assertRaisesRegex(ValueError, "not a valid name"):
            w.task("Q Q")


class JobTest(unittest.TestCase):
    TASK = {"id": "t1", "workspace": "default", "spec": {"queue": "q", "title": "x", "input": {"a": 1}},
            "checkpoint": {"step": 2}, "signal": {"name": "go", "payload": {"by": "me"}},
            "attempts": [{"n": 1, "state": "failed"}, {"n": 2, "state": "running", "operation_key": "op-t1"}],
            "verifications": [{"attempt": 1, "outcome": "FAIL"}, {"attempt": 1, "outcome": "PASS"}],
            "approvals": [{"id": "t1-1", "action_digest": "sha256:ab", "action": {"x": 1}, "state": "decided",
                           "decision": {"response": "approve", "approver": "ada", "decided_at": "2026-01-01T00:00:00Z"}},
                          {"id": "t1-2", "action_digest": "sha256:cd", "state": "expired", "expires_at": "2026-01-02T00:00:00Z"}]}

    def test_a_job_of_a_task(self) -> None:
        job = Job(None, self.TASK, self.TASK["attempts"][1])  # type: ignore[arg-type]
        self.assertEqual((job.task_id, job.queue, job.attempt, job.operation_key), ("t1", "q", 2, "op-t1"))
        self.assertEqual(job.input, {"a": 1})
        self.assertEqual(job.checkpoint, {"step": 2})
        self.assertEqual(job.signal, dwr.Signal("go", {"by": "me"}))
        self.assertEqual([a["n"] for a in job.prior_attempts], [1])
        self.assertEqual(len(job.verifications), 1, "only the FAIL verdicts")
        self.assertEqual([d.response for d in job.decisions], ["approve", "expired"])
        self.assertEqual(job.approval.response, "expired")  # type: ignore[union-attr]
        self.assertEqual(job.omitted, [], "a task sent whole omits nothing")
        fitted = dict(self.TASK, omitted=["/attempts/0/result"])
        self.assertEqual(Job(None, fitted, fitted["attempts"][1]).omitted, ["/attempts/0/result"])  # type: ignore[arg-type]

    def test_waits(self) -> None:
        job = Job(None, self.TASK, self.TASK["attempts"][1])  # type: ignore[arg-type]
        w = job.sleep(datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=timezone.utc))
        self.assertIsInstance(w, dwr.Wait)
        self.assertEqual(_rfc3339(w.until), "2026-01-02T03:04:05.600000Z")  # type: ignore[arg-type]
        self.assertEqual(job.await_signal("go").signal, "go")

    def test_decisions(self) -> None:
        self.assertTrue(_decisions_of(self.TASK)[0].approved)

    def test_attempt_count(self) -> None:
        self.assertEqual(_attempt_count(self.TASK), 2)
        self.assertEqual(_attempt_count(dict(self.TASK, earlier_attempts={"count": 150})), 152, "the tallied ones count too")


class _Asks:
    """A delivery that records the job's approval requests: each
    task.request_approval is answered with the next approval's id."""

    traceparent = ""

    def __init__(self) -> None:
        self.sent: List[Tuple[str, Dict[str, Any], str]] = []

    async def attempt_token(self) -> str:
        return "tok"

    async def command(self, name: str, body: Any, command_id: str) -> Any:
        self.sent.append((name, body, command_id))
        return {"approval_id": "t1-%d" % (len(self.sent) + 9)}


class ApprovalRoleTest(unittest.IsolatedAsyncioTestCase):
    """A decision counts for a request only when it is on the same action
    and was asked of the same role (as the Go SDK's
    TestTwoRolesSignOffOnTheSameAction)."""

    PAYMENT = {"pay": {"to": "ACME", "cents": 990000}}
    DIGEST = dwr.action_digest(PAYMENT)

    def approval(self, n: int, role: str, decision: Optional[Dict[str, Any]] = None, **kw: Any) -> Dict[str, Any]:
        a: Dict[str, Any] = {"id": "t1-%d" % n, "action_digest": self.DIGEST, "action": self.PAYMENT, "role": role,
                             "state": "decided" if decision else "pending", **kw}
        if decision:
            a["decision"] = dict({"response": "approve", "decided_at": "2026-01-01T00:00:00Z"}, **decision)
        return a

    def job(self, approvals: List[Dict[str, Any]], spec: Optional[Dict[str, Any]] = None) -> Tuple[Job, _Asks]:
        d = _Asks()
        task = {"id": "t1", "workspace": "default", "spec": dict({"queue": "payments"}, **(spec or {})),
                "attempts": [{"n": 2, "state": "running"}], "approvals": approvals}
        return Job(d, task, task["attempts"][0]), d  # type: ignore[arg-type]

    async def test_two_roles_sign_off_on_the_same_action(self) -> None:
        job, asks = self.job([self.approval(1, "finance", {"approver": "ada", "role": "finance"})])
        self.assertEqual(job.decisions[0].asked_role, "finance")
        d = await job.request_approval(self.PAYMENT, role="finance")
        self.assertEqual((d.approval_id, d.approver, d.asked_role), ("t1-1", "ada", "finance"))
        with self.assertRaises(dwr.ApprovalPending) as cm:
            await job.request_approval(self.PAYMENT, role="legal")
        self.assertEqual(cm.exception.action_digest, self.DIGEST)
        self.assertEqual([(n, b["role"]) for n, b, _ in asks.sent], [("task.request_approval", "legal")],
                         "finance's decision does not stand for legal's: legal is asked")
        with self.assertRaises(dwr.ApprovalPending):
            await job.request_approval(self.PAYMENT)  # asked of any approver: neither finance's nor legal's
        self.assertEqual(len(asks.sent), 2)

        job, asks = self.job([self.approval(1, "finance", {"approver": "ada", "role": "finance"}),
                              self.approval(2, "legal", {"approver": "lee", "role": "legal", "response": "reject"})])
        self.assertEqual((await job.request_approval(self.PAYMENT, role="finance")).approver, "ada")
        d = await job.request_approval(self.PAYMENT, role="legal")
        self.assertEqual((d.approver, d.response), ("lee", "reject"))
        self.assertEqual(asks.sent, [], "each role's decision is found: nothing is asked again")

    async def test_an_escalated_request_counts_for_the_role_it_asked(self) -> None:
        # The service records an escalation's approval with the approval it
        # escalated and the role first asked.
        approvals = [self.approval(1, "finance", {"approver": "ada", "role": "finance", "response": "escalate",
                                                  "branch": "escalate"}, escalate_to="counsel", asked_role="finance"),
                     self.approval(2, "counsel", {"approver": "gc", "role": "counsel"}, escalated_from="t1-1",
                                   asked_role="finance")]
        ds = _decisions_of({"approvals": approvals})
        self.assertEqual([(d.approval_id, d.asked_role) for d in ds], [("t1-1", "finance"), ("t1-2", "finance")])
        job, asks = self.job(approvals)
        d = await job.request_approval(self.PAYMENT, role="finance")
        self.assertEqual((d.approval_id, d.approver, d.role, d.asked_role, d.approved), ("t1-2", "gc", "counsel", "finance", True))
        with self.assertRaises(dwr.ApprovalPending):
            await job.request_approval(self.PAYMENT, role="counsel")  # counsel was not asked by the job
        self.assertEqual(len(asks.sent), 1)

        # An approval no escalation made asked its own role, whatever
        # asked_role says; so does an escalation's recorded by a service
        # that did not record escalated_from: finance's decision is then
        # its own, the escalation — not an approval.
        forged = dict(approvals[1], asked_role="finance")
        del forged["escalated_from"]
        self.assertEqual(_decisions_of({"approvals": [approvals[0], forged]})[1].asked_role, "counsel")
        job, asks = self.job([approvals[0], forged])
        d = await job.request_approval(self.PAYMENT, role="finance")
        self.assertEqual((d.approval_id, d.response, d.approved), ("t1-1", "escalate", False))
        self.assertEqual(asks.sent, [])

    async def test_a_quorums_decision_names_every_approver(self) -> None:
        signed = {"approver": "ada", "role": "finance", "response": "approve", "branch": "resume"}
        quorum = self.approval(1, "finance", {"approver": "bo", "role": "finance"}, quorum=2, sign_offs=[signed])
        job, asks = self.job([quorum])
        d = await job.request_approval(self.PAYMENT, role="finance", quorum=2)
        self.assertEqual((d.approver, d.approvers), ("bo", ["ada", "bo"]))
        rejected = dict(quorum, decision=dict(quorum["decision"], response="reject"))
        self.assertEqual(_decisions_of({"approvals": [rejected]})[0].approvers, [], "a rejection is one approver's")
        job, asks = self.job([])
        with self.assertRaises(dwr.ApprovalPending):
            await job.request_approval(self.PAYMENT, role="finance", quorum=2)
        self.assertEqual(asks.sent[0][1]["quorum"], 2)
        self.assertNotIn("exclude_requester", asks.sent[0][1], "not asked: not sent")
        job, asks = self.job([])
        with self.assertRaises(dwr.ApprovalPending):
            await job.request_approval(self.PAYMENT, role="finance", exclude_requester=True)
        self.assertIs(asks.sent[0][1]["exclude_requester"], True)

    async def test_a_request_without_a_role_asks_the_task_approval_role(self) -> None:
        approvals = [self.approval(1, "finance", {"approver": "ada", "role": "finance"})]
        job, asks = self.job(approvals, {"approval": {"role": "finance", "escalate_to": "counsel"}})
        self.assertEqual((await job.request_approval(self.PAYMENT)).approval_id, "t1-1",
                         "the service gave the request the task's approval role")
        with self.assertRaises(dwr.ApprovalPending):
            await job.request_approval(self.PAYMENT, role="legal")
        self.assertEqual(len(asks.sent), 1)

        job, asks = self.job(approvals)  # no approval settings: a request without a role asks any approver
        with self.assertRaises(dwr.ApprovalPending):
            await job.request_approval(self.PAYMENT)
        self.assertNotIn("role", asks.sent[0][1])
        job, asks = self.job([self.approval(1, "", {"approver": "ada", "role": "finance"})])
        self.assertEqual((await job.request_approval(self.PAYMENT)).asked_role, "")


class LazyItemTest(unittest.TestCase):
    """Only a first delivery of a fresh item that carries its task, ready
    for exactly the item's attempt, runs before its claim (as the Go SDK's
    TestWhichItemsRunBeforeTheirClaim)."""

    ID = "01Q3G99648H87N2YG8NR952X83"
    ITEM = {"kind": "execute", "task_id": ID, "workspace": "default", "queue": "q", "attempt": 2,
            "task": {"id": ID, "workspace": "default", "spec": {"queue": "q"}, "state": "ready",
                     "attempts": [{"n": 1, "state": "failed"}]}}

    def item(self, edit: Any = None) -> Dict[str, Any]:
        it = copy.deepcopy(self.ITEM)
        if edit is not None:
            edit(it)
        return it

    def test_which_items_run_before_their_claim(self) -> None:
        now = time.time()
        self.assertTrue(lazy_item(self.item(), 1, now, now))
        self.assertTrue(lazy_item(self.item(), 1, now - LAZY_MAX_AGE / 2, now))
        self.assertFalse(lazy_item(self.item(), 1, now - 2 * LAZY_MAX_AGE, now), "it waited in the stream: claim first")
        self.assertFalse(lazy_item(self.item(), 1, 0.0, now), "no stream timestamp: claim first")
        self.assertFalse(lazy_item(self.item(), 2, now, now), "a redelivery claims first (it may supersede)")
        edits = {
            "no task": lambda it: it.update(task=None),
            "another task": lambda it: it["task"].update(id="01Q3G99648H87N2YG8NR952X84"),
            "another workspace": lambda it: it["task"].update(workspace="other"),
            "another queue": lambda it: it["task"]["spec"].update(queue="other"),
            "not ready": lambda it: it["task"].update(state="running"),
            "another attempt": lambda it: it.update(attempt=3),
        }
        for name, edit in edits.items():
            self.assertFalse(lazy_item(self.item(edit), 1, now, now), name)


class _Claims(LazyClaim):
    """A delivery's lazy claim on a scripted service: each task.claim is
    answered by the next of replies (a dict, a DwrError to raise, or None to
    hang until cancelled); task.get answers task."""

    def __init__(self, replies: List[Any], task: Optional[Dict[str, Any]] = None) -> None:
        self.w = mock.Mock(executor="py", version="1.2")
        self.item = {"task_id": "t1", "attempt": 1}
        self.delivered = 1
        self.job = None
        self.ended = None
        self.beat = None
        self._init_claim()
        self.lazy = True
        self.replies = list(replies)
        self.task = task or {"state": "ready"}
        self.sent: List[Tuple[str, Dict[str, Any], str]] = []
        self.cancelled: List[str] = []

    async def command(self, name: str, body: Any, command_id: str) -> Any:
        self.sent.append((name, body, command_id))
        r = self.replies.pop(0)
        if r is None:
            await asyncio.Event().wait()
        if isinstance(r, DwrError):
            raise r
        return r

    async def get_task(self, task_id: str, min_seq: int = 0) -> Dict[str, Any]:
        return self.task

    def _cancel(self, cause: str) -> None:
        self.cancelled.append(cause)


RUNNING = {"state": "running", "attempt": 1, "token": "tok-1"}


class LazyClaimTest(unittest.IsolatedAsyncioTestCase):
    async def test_the_first_need_claims_once(self) -> None:
        c = _Claims([RUNNING])
        self.assertEqual(await c.attempt_token(), "tok-1")
        self.assertEqual(await c.attempt_token(), "tok-1")
        self.assertEqual(len(c.sent), 1)
        name, body, cid = c.sent[0]
        self.assertEqual((name, cid), ("task.claim", "claim.t1.1.1"))
        self.assertEqual(body, {"task_id": "t1", "executor": "py", "executor_version": "1.2", "omit_task": True})
        self.assertEqual(c.beat, {"task_id": "t1", "attempt": 1, "token": "tok-1"}, "it heartbeats from then on")
        self.assertEqual(await c.report_claim(), ("tok-1", None), "its report carries the token")

    async def test_an_unclaimed_report_carries_the_claim_and_seals_it(self) -> None:
        c = _Claims([])
        self.assertEqual(await c.report_claim(), ("", {"executor": "py", "executor_version": "1.2"}))
        with self.assertRaises(RuntimeError):
            await c.attempt_token()
        await c.claim_at_heartbeat(1.0)
        self.assertEqual(c.sent, [], "no claim once the report carries it")

    async def test_a_heartbeat_is_not_held_up_by_a_claim(self) -> None:
        c = _Claims([None, RUNNING])
        started = time.monotonic()
        await c.claim_at_heartbeat(0.05)  # not answered within the bound
        self.assertLess(time.monotonic() - started, 2.0)
        self.assertFalse(c.claim_lock.locked())
        self.assertEqual(c.token, "")
        # The job's own claim in flight: the heartbeat does not wait for it.
        c.replies = [None]
        need = asyncio.get_running_loop().create_task(c.attempt_token())
        while not c.claim_lock.locked():
            await asyncio.sleep(0)
        await asyncio.wait_for(c.claim_at_heartbeat(10.0), 1.0)
        self.assertEqual(len(c.sent), 2, "no claim beside the one in flight")
        need.cancel()  # the job's command was cancelled before its answer
        await asyncio.wait({need})
        c.replies = [RUNNING]
        await c.claim_at_heartbeat(1.0)
        self.assertEqual(c.token, "tok-1")
        self.assertEqual({cid for _, _, cid in c.sent}, {"claim.t1.1.1"}, "sent again with the same command id")

    async def test_a_heartbeat_after_the_job_ended_claims_nothing(self) -> None:
        c = _Claims([RUNNING])
        c.job_ended = True
        await c.claim_at_heartbeat(1.0)
        self.assertEqual(c.sent, [])

    async def test_refusals_cancel_the_job_with_their_cause(self) -> None:
        cases = [
            ("conflict, the task ended", DwrError("conflict", "not ready"), {"state": "cancelled"}, "cancelled"),
            ("conflict, another claimed it", DwrError("conflict", "not ready"), {"state": "running"}, "lease_lost"),
            ("not found", DwrError("not_found", "gone"), {"state": "cancelled"}, "cancelled"),
            ("forbidden", DwrError("forbidden", "no"), {"state": "cancelled"}, "lease_lost"),
            ("the claim failed the task", {"state": "failed", "attempt": 1}, None, "cancelled"),
            ("another attempt", {"state": "running", "attempt": 2, "token": "x"}, None, "lease_lost"),
            ("no token", {"state": "running", "attempt": 1}, None, "lease_lost"),
        ]
        for name, reply, task, cause in cases:
            with self.subTest(name):
                c = _Claims([reply], task)
                with self.assertRaises(dwr.AttemptEnded) as cm:
                    await c.attempt_token()
                self.assertEqual(cm.exception.cause, cause)
                self.assertEqual(c.cancelled, [cause])
                self.assertEqual(c.token, "")
                self.assertIsNone(c.beat)
                with self.assertRaises(dwr.AttemptEnded):
                    await c.report_claim()  # nothing is reported
                await c.claim_at_heartbeat(1.0)
                self.assertEqual(len(c.sent), 1, "a refused claim is not made again")

    async def test_a_watched_end_is_cancelled_without_reading_the_task(self) -> None:
        c = _Claims([DwrError("conflict", "not ready")], {"state": "running"})
        c.ended = "cancelled"
        with self.assertRaises(dwr.AttemptEnded) as cm:
            await c.attempt_token()
        self.assertEqual(cm.exception.cause, "cancelled")


class TraceTest(unittest.TestCase):
    def test_valid_traceparents(self) -> None:
        self.assertTrue(valid_traceparent(TP))
        self.assertTrue(valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more"),
                        "a later version may add fields")
        for bad in ("", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", TP.upper(),
                    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TP + "-x", TP + "\r\nX: y"):
            self.assertFalse(valid_traceparent(bad), bad)

    def test_trace_headers(self) -> None:
        self.assertEqual(trace_headers(TP, "a=1"), {"traceparent": TP, "tracestate": "a=1"})
        self.assertEqual(trace_headers("", "a=1"), {}, "a tracestate without its traceparent means nothing")
        self.assertEqual(trace_headers("junk"), {})
        self.assertEqual(trace_headers(TP, "a=1\r\nX: y"), {"traceparent": TP})

    def test_a_client_takes_its_trace_from_the_environment_unless_given(self) -> None:
        with mock.patch.dict(os.environ, {"TRACEPARENT": TP}):
            self.assertEqual(Client(_nats.Client()).traceparent, TP)
            self.assertEqual(Client(_nats.Client(), traceparent="").traceparent, "", "\"\" is none")
            other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            self.assertEqual(Client(_nats.Client(), traceparent=other).traceparent, other)
        with mock.patch.dict(os.environ, {"TRACEPARENT": "junk"}):
            self.assertEqual(Client(_nats.Client()).traceparent, "", "a malformed one is ignored")
        with self.assertRaisesRegex(ValueError, "not a W3C traceparent"):
            Client(_nats.Client(), traceparent="junk")

    def test_a_request_carries_the_trace(self) -> None:
        c = Client(_nats.Client(), traceparent=TP, tracestate="a=1")
        self.assertEqual(c._traced({"Dwr-Command-Id": "x"}, None, ""),
                         {"Dwr-Command-Id": "x", "traceparent": TP, "tracestate": "a=1"})
        self.assertEqual(c._traced(None, "", ""), None, "a request's own \"\" sends none")
        self.assertIsNone(Client(_nats.Client(), traceparent="")._traced(None, None, ""))

    def test_an_items_trace(self) -> None:
        self.assertEqual(_item_trace({"traceparent": TP, "tracestate": "a=1"}), (TP, "a=1"))
        self.assertEqual(_item_trace({"Traceparent": TP}), (TP, ""))
        self.assertEqual(_item_trace({"traceparent": "junk", "tracestate": "a=1"}), ("", ""))
        self.assertEqual(_item_trace(None), ("", ""))


if __name__ == "__main__":
    unittest.main()
