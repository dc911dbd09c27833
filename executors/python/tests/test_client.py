"""Client's goal commands and queries without a server: the subjects and
bodies they send (goal labels: goal.create's, goal.label, goal.list's
filter; goal keys: goal.create's key and if_open, goal.get by key; queue
administration: queue.configure, pause, resume, delete, queue.list;
rituals: ritual.run)."""

from __future__ import annotations

import copy
import os
import sys
import unittest
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import dwr  # noqa: E402


class RecordingClient(dwr.Client):
    """A Client whose requests are recorded (subject, body) and answered
    with replies, the last one again once they run out."""

    def __init__(self, *replies: Dict[str, Any]) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.replies = list(replies) or [{"ok": True, "result": {"id": "G-1"}}]
        self.sent: List[Tuple[str, Any]] = []

    async def request(self, subject: str, body: Any = None, headers: Optional[Dict[str, str]] = None,
                      **kwargs: Any) -> Dict[str, Any]:
        self.sent.append((subject, copy.deepcopy(body)))  # list() reuses its query
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


class GoalLabelsTest(unittest.IsolatedAsyncioTestCase):
    async def test_create_goal_sends_its_labels(self) -> None:
        c = RecordingClient()
        await c.create_goal("onboard ACME", labels={"customer": "acme", "ticket": ""})
        self.assertEqual(c.sent, [("dwr.cmd.default.goal.create",
                                   {"title": "onboard ACME", "labels": {"customer": "acme", "ticket": ""}})])
        await c.create_goal("no labels")
        self.assertNotIn("labels", c.sent[1][1], "none given: none sent")

    async def test_label_goal_sets_and_removes(self) -> None:
        c = RecordingClient({"ok": True, "result": {"id": "G-1", "duplicate": True}})
        r = await c.label_goal("G-1", set={"stage": "review"}, remove=("owner",), command_id="label-1")
        self.assertEqual(r, {"id": "G-1", "duplicate": True})
        self.assertEqual(c.sent, [("dwr.cmd.default.goal.label",
                                   {"goal_id": "G-1", "set": {"stage": "review"}, "remove": ["owner"]})])
        await c.label_goal("G-1", remove=["stage"])
        self.assertEqual(c.sent[1][1], {"goal_id": "G-1", "remove": ["stage"]}, "only what is given")

    async def test_label_goal_without_a_change_is_refused_unsent(self) -> None:
        c = RecordingClient()
        with self.assertRaisesRegex(ValueError, "set or names to remove"):
            await c.label_goal("G-1", set={}, remove=[])
        self.assertEqual(c.sent, [], "nothing was sent")

    async def test_goals_filters_by_labels_page_after_page(self) -> None:
        c = RecordingClient({"ok": True, "result": [{"id": "G-1"}], "next": "G-1"},
                            {"ok": True, "result": [{"id": "G-2"}]})
        got = [g["id"] async for g in c.goals(labels={"customer": "acme"}, state="open", limit=1)]
        self.assertEqual(got, ["G-1", "G-2"])
        self.assertEqual(c.sent, [
            ("dwr.q.default.goal.list", {"state": "open", "labels": {"customer": "acme"}, "limit": 1}),
            ("dwr.q.default.goal.list", {"state": "open", "labels": {"customer": "acme"}, "limit": 1, "after": "G-1"}),
        ])
        c = RecordingClient({"ok": True, "result": []})
        self.assertEqual([g async for g in c.goals(labels={})], [])
        self.assertEqual(c.sent, [("dwr.q.default.goal.list", {})], "no labels: no filter")


class TaskLabelsTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_tasks_labels_are_sent_set_and_listed(self) -> None:
        c = RecordingClient({"ok": True, "result": {"id": "T-1"}})
        await c.create_task("mail", {"n": 1}, labels={"customer": "acme"})
        self.assertEqual(c.sent[0], ("dwr.cmd.default.task.create",
                                     {"spec": {"queue": "mail", "input": {"n": 1}}, "labels": {"customer": "acme"}}))
        await c.label_task("T-1", set={"stage": "sent"}, remove=["customer"])
        self.assertEqual(c.sent[1], ("dwr.cmd.default.task.label",
                                     {"task_id": "T-1", "set": {"stage": "sent"}, "remove": ["customer"]}))
        with self.assertRaisesRegex(ValueError, "label_task: give labels"):
            await c.label_task("T-1")
        c = RecordingClient({"ok": True, "result": [{"id": "T-1"}]})
        self.assertEqual([t["id"] async for t in c.tasks(labels={"stage": "sent"}, queue="mail")], ["T-1"])
        self.assertEqual(c.sent, [("dwr.q.default.task.list", {"queue": "mail", "labels": {"stage": "sent"}})])

    async def test_a_tasks_priority_is_part_of_its_spec(self) -> None:
        c = RecordingClient({"ok": True, "result": {"id": "T-2"}})
        await c.create_task("triage", {"n": 2}, priority=1)
        self.assertEqual(c.sent[0], ("dwr.cmd.default.task.create",
                                     {"spec": {"queue": "triage", "priority": 1, "input": {"n": 2}}}))


class GoalPriorityTest(unittest.IsolatedAsyncioTestCase):
    async def test_create_goal_sends_its_priority(self) -> None:
        c = RecordingClient()
        await c.create_goal("urgent", priority=1, labels={"customer": "acme"})
        self.assertEqual(c.sent, [("dwr.cmd.default.goal.create",
                                   {"title": "urgent", "labels": {"customer": "acme"}, "priority": 1})])
        await c.create_goal("no priority")
        self.assertNotIn("priority", c.sent[1][1], "none given: none sent")

    async def test_prioritize_goal_sends_goal_prioritize(self) -> None:
        c = RecordingClient({"ok": True, "result": {"id": "G-1", "duplicate": True}})
        r = await c.prioritize_goal("G-1", 5, command_id="prio-1")
        self.assertEqual(r, {"id": "G-1", "duplicate": True})
        self.assertEqual(c.sent, [("dwr.cmd.default.goal.prioritize", {"goal_id": "G-1", "priority": 5})])


class GoalKeyTest(unittest.IsolatedAsyncioTestCase):
    async def test_create_goal_sends_its_key_and_if_open(self) -> None:
        c = RecordingClient({"ok": True, "result": {"id": "G-1", "duplicate": True}})
        r = await c.create_goal("order 1042", key="order-1042", if_open="use")
        self.assertEqual(r, {"id": "G-1", "duplicate": True})
        self.assertEqual(c.sent, [("dwr.cmd.default.goal.create",
                                   {"title": "order 1042", "key": "order-1042", "if_open": "use"})])
        await c.create_goal("no key")
        self.assertNotIn("key", c.sent[1][1], "none given: none sent")
        self.assertNotIn("if_open", c.sent[1][1], "none given: none sent")

    async def test_goal_by_key_sends_goal_get_with_the_key(self) -> None:
        c = RecordingClient({"ok": True, "result": {"id": "G-1", "key": "order-1042"}})
        g = await c.goal_by_key("order-1042")
        self.assertEqual(g, {"id": "G-1", "key": "order-1042"})
        self.assertEqual(c.sent, [("dwr.q.default.goal.get", {"key": "order-1042"})])


class QueueAdminTest(unittest.IsolatedAsyncioTestCase):
    async def test_configure_queue_sends_what_is_given_and_defaults(self) -> None:
        settings = {"queue": "llm", "lease_ms": 60000, "max_deliver": 3, "max_running": 4, "rate_limit": 60,
                    "rate_period_ms": 60000, "order": "priority", "version": 2}
        c = RecordingClient({"ok": True, "result": settings})
        r = await c.configure_queue("llm", lease_ms=60000, max_deliver=3, max_running=4, rate_limit=60,
                                    rate_period_ms=60000, order="priority", command_id="cfg-1")
        self.assertEqual(r, settings, "the settings in effect")
        self.assertEqual(c.sent, [("dwr.cmd.default.queue.configure",
                                   {"queue": "llm", "lease_ms": 60000, "max_deliver": 3, "max_running": 4,
                                    "rate_limit": 60, "rate_period_ms": 60000, "order": "priority"})])
        await c.configure_queue("mail")
        self.assertEqual(c.sent[1], ("dwr.cmd.default.queue.configure",
                                     {"queue": "mail", "lease_ms": 30000, "max_deliver": 5}),
                         "the defaults; none of the optional fields, nor if_unset, sent")

    async def test_configure_queue_removes_limits_and_sets_if_unset(self) -> None:
        c = RecordingClient({"ok": True, "result": {"queue": "llm", "lease_ms": 30000, "max_deliver": 5}})
        await c.configure_queue("llm", max_running=-1, rate_limit=-1, order="fifo", if_unset=True)
        self.assertEqual(c.sent, [("dwr.cmd.default.queue.configure",
                                   {"queue": "llm", "lease_ms": 30000, "max_deliver": 5, "max_running": -1,
                                    "rate_limit": -1, "order": "fifo", "if_unset": True})])

    async def test_pause_resume_and_delete_name_the_queue(self) -> None:
        c = RecordingClient({"ok": True, "result": {"queue": "mail", "lease_ms": 30000, "max_deliver": 5,
                                                    "paused": True}},
                            {"ok": True, "result": {"queue": "mail", "lease_ms": 30000, "max_deliver": 5}},
                            {"ok": True, "result": {"id": "mail", "version": 4}})
        self.assertTrue((await c.pause_queue("mail"))["paused"])
        self.assertNotIn("paused", await c.resume_queue("mail", command_id="resume-1"))
        await c.delete_queue("mail")
        self.assertEqual(c.sent, [("dwr.cmd.default.queue.pause", {"queue": "mail"}),
                                  ("dwr.cmd.default.queue.resume", {"queue": "mail"}),
                                  ("dwr.cmd.default.queue.delete", {"queue": "mail"})])

    async def test_queues_lists_queue_list_page_after_page(self) -> None:
        c = RecordingClient({"ok": True, "result": [{"name": "llm", "pending": 2, "in_flight": 1,
                                                     "waiting_pulls": 0}], "next": "llm"},
                            {"ok": True, "result": [{"name": "mail", "pending": 0, "in_flight": 0,
                                                     "waiting_pulls": 1, "paused": True}]})
        got = [q async for q in c.queues()]
        self.assertEqual([(q["name"], q["pending"], q.get("paused", False)) for q in got],
                         [("llm", 2, False), ("mail", 0, True)])
        self.assertEqual(c.sent, [("dwr.q.default.queue.list", {}),
                                  ("dwr.q.default.queue.list", {"after": "llm"})])


class RitualTest(unittest.IsolatedAsyncioTestCase):
    async def test_run_ritual_sends_ritual_run(self) -> None:
        c = RecordingClient({"ok": True, "result": {"id": "G-1", "version": 1,
                                                    "tasks": [{"key": "draft", "task_id": "T-1"}]}})
        r = await c.run_ritual("release", {"version": "1.2", "dry_run": False}, version=3,
                               labels={"team": "core"}, key="release-1.2", if_open="use", command_id="run-1")
        self.assertEqual(r["id"], "G-1")
        self.assertEqual(r["tasks"], [{"key": "draft", "task_id": "T-1"}])
        self.assertEqual(c.sent, [("dwr.cmd.default.ritual.run",
                                   {"name": "release", "version": 3, "params": {"version": "1.2", "dry_run": False},
                                    "labels": {"team": "core"}, "key": "release-1.2", "if_open": "use"})])

    async def test_run_ritual_sends_only_what_is_given(self) -> None:
        c = RecordingClient()
        await c.run_ritual("release")
        await c.run_ritual("release", {}, labels={})
        self.assertEqual(c.sent, [("dwr.cmd.default.ritual.run", {"name": "release"}),
                                  ("dwr.cmd.default.ritual.run", {"name": "release", "params": {}})],
                         "none given: none sent (empty params are sent as given)")


if __name__ == "__main__":
    unittest.main()
