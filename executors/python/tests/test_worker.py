"""Unit tests of the worker's parts that need no server."""

from __future__ import annotations

import unittest
from datetime import datetime, timezone

import dwr
from dwr import _nats
from dwr.worker import Job, _decisions_of, _rfc3339


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
        job = Job(None, self.TASK, self.TASK["attempts"][1], "tok")  # type: ignore[arg-type]
        self.assertEqual((job.task_id, job.queue, job.attempt, job.operation_key), ("t1", "q", 2, "op-t1"))
        self.assertEqual(job.input, {"a": 1})
        self.assertEqual(job.checkpoint, {"step": 2})
        self.assertEqual(job.signal, dwr.Signal("go", {"by": "me"}))
        self.assertEqual([a["n"] for a in job.prior_attempts], [1])
        self.assertEqual(len(job.verifications), 1, "only the FAIL verdicts")
        self.assertEqual([d.response for d in job.decisions], ["approve", "expired"])
        self.assertEqual(job.approval.response, "expired")  # type: ignore[union-attr]

    def test_waits(self) -> None:
        job = Job(None, self.TASK, self.TASK["attempts"][1], "tok")  # type: ignore[arg-type]
        w = job.sleep(datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=timezone.utc))
        self.assertIsInstance(w, dwr.Wait)
        self.assertEqual(_rfc3339(w.until), "2026-01-02T03:04:05.600000Z")  # type: ignore[arg-type]
        self.assertEqual(job.await_signal("go").signal, "go")

    def test_decisions(self) -> None:
        self.assertTrue(_decisions_of(self.TASK)[0].approved)


if __name__ == "__main__":
    unittest.main()
