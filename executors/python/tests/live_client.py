"""dwr.Client against a running dwr serve: run by go test -run TestPythonClient
./integration/ (DWR_SERVER, and DWR_CREDS a client's credential). Not a
unittest module: it needs the service."""

from __future__ import annotations

import asyncio
import os
import sys

import dwr


async def expect_error(coro, code: str, field: str | None = None) -> dwr.DwrError:
    try:
        await coro
    except dwr.DwrError as e:
        assert e.code == code, "want %s, got %r" % (code, e)
        if field is not None:
            assert e.field == field, "want field %s, got %r (%s)" % (field, e.field, e.fields)
        return e
    raise AssertionError("no error; want %s" % code)


async def main() -> None:
    import time
    t0 = time.monotonic()
    async with await dwr.Client.connect(os.environ["DWR_SERVER"], os.environ["DWR_CREDS"]) as c:
        # A goal with its first plan, then a revision.
        g = await c.create_goal("py goal", tasks=[{"key": "a", "queue": "pyq"},
                                                   {"key": "b", "queue": "pyq", "depends_on": ["a"]}])
        assert {t["key"] for t in g["tasks"]} == {"a", "b"}, g
        p = await c.submit_plan(g["id"], [{"key": "a", "queue": "pyq"}, {"key": "b", "queue": "pyq", "depends_on": ["a"]},
                                          {"key": "c", "queue": "pyq"}])
        assert p["plan_version"] == 2, p
        view = await c.goal(g["id"])  # reads the client's own write (Dwr-Min-Seq)
        assert view["id"] == g["id"] and view["state"] == "open", view
        assert {n["key"] for n in view["nodes"]} == {"a", "b", "c"}, view["nodes"]

        # wait_goal follows the goal's events: it returns once the goal has
        # ended (here cancelled while it waits) — by the event, as its poll
        # (60 s) is past its timeout (20 s).
        w = await c.create_goal("py wait", tasks=[{"key": "a", "queue": "pyq"}])
        waiting = asyncio.ensure_future(c.wait_goal(w["id"], timeout=20, poll=60))
        await c.cancel_goal(w["id"], "py wait test")
        ended = await waiting
        assert ended["state"] == "cancelled" and ended["reason"] == "py wait test", ended
        assert (await c.wait_goal(w["id"], timeout=5))["state"] == "cancelled", "an ended goal is returned at once"
        try:
            await c.wait_goal(g["id"], timeout=0.5)
            raise AssertionError("wait_goal of an open goal returned")
        except asyncio.TimeoutError:
            pass

        # Lists page after page: three pages of one goal each reach this one.
        ids = [x["id"] async for x in c.goals(limit=1)]
        assert g["id"] in ids and w["id"] in ids and len(ids) == len(set(ids)), ids
        assert [x["id"] async for x in c.goals(state="cancelled", limit=1)] == [w["id"]]
        assert [x["id"] async for x in c.goals(newest_first=True, limit=1)] == ids[::-1], "newest first"
        keys = sorted([x["key"] async for x in c.tasks(goal_id=g["id"], limit=2)])
        assert keys == ["a", "b", "c"], keys
        keys = sorted([x["key"] async for x in c.tasks(goal_id=g["id"], queue="pyq")])
        assert keys == ["a", "b", "c"], keys
        assert [x async for x in c.tasks(goal_id=g["id"], queue="other")] == [], "by queue"

        # Labels: given at creation, listed by, changed (an ended goal's too).
        run = {"run": g["id"]}  # this run's goals only
        lg = await c.create_goal("py labeled", labels={**run, "sdk": "python"})
        assert (await c.goal(lg["id"]))["labels"] == {**run, "sdk": "python"}
        assert [x["id"] async for x in c.goals(labels={**run, "sdk": "python"})] == [lg["id"]]
        await c.cancel_goal(lg["id"], "py labels test")
        await c.label_goal(lg["id"], set={"stage": "done"}, remove=["sdk"])
        assert (await c.goal(lg["id"]))["labels"] == {**run, "stage": "done"}
        assert [x async for x in c.goals(labels={**run, "sdk": "python"})] == [], "sdk removed"
        assert [x["id"] async for x in c.goals(labels={**run, "stage": "done"}, state="cancelled")] == [lg["id"]]
        assert (await c.label_goal(lg["id"], remove=["sdk"])).get("duplicate") is True, "nothing left to remove"
        await expect_error(c.label_goal(lg["id"], set={"Not A Label": "x"}), "invalid")

        # A standalone task: read, signalled (kept: it does not wait yet), cancelled.
        t = await c.create_task("pyq", {"n": 1}, title="py task")
        got = await c.task(t["id"])
        assert got["state"] == "ready" and got["spec"]["input"] == {"n": 1}, got
        await c.signal(t["id"], "go", {"by": "py"})
        got = await c.task(t["id"])
        assert [s["name"] for s in got.get("pending_signals", [])] == ["go"], got
        await c.cancel_task(t["id"], "py test")
        assert (await c.task(t["id"]))["state"] == "cancelled"
        await expect_error(c.signal(t["id"], "go"), "conflict", "/task_id")

        # Refusals carry the code and the field.
        await expect_error(c.create_task("Not A Queue"), "invalid", "/spec/queue")
        await expect_error(c.task("01M8V7X5XHF3EHMEV2MFVAWN09"), "not_found")

        # One command id, one command: the retry is answered with the first outcome.
        first = await c.create_task("pyq", {"n": 2}, command_id="py-create-1")
        again = await c.create_task("pyq", {"n": 2}, command_id="py-create-1")
        assert first["id"] == again["id"], (first, again)
        await expect_error(c.create_task("pyq", {"n": 3}, command_id="py-create-1"), "conflict")

        # A command the client's role may not send: the NATS server refuses the subject.
        await expect_error(c.command("task.claim", {"task_id": t["id"], "executor": "x"}), "forbidden")

        # A goal's key names one open goal; its priority is set and changed.
        k = await c.create_goal("py order", key="py-order-1", priority=2)
        await expect_error(c.create_goal("py order again", key="py-order-1"), "conflict", "/key")
        assert (await c.create_goal("py order again", key="py-order-1", if_open="use"))["id"] == k["id"]
        assert (await c.prioritize_goal(k["id"], 1)).get("duplicate") is not True
        kv = await c.goal_by_key("py-order-1")
        assert kv["id"] == k["id"] and kv["key"] == "py-order-1" and kv["priority"] == 1, kv
        await expect_error(c.goal_by_key("py-order-9"), "not_found")

        # A ritual run with a key; queues are an admin's to configure.
        await c.command("ritual.define", {"name": "py-onboard", "parameters": {"type": "object", "properties": {"who": {"type": "string"}}},
                                          "goal": {"title": "Onboard ${who}", "key": "py-onboard-${who}"},
                                          "tasks": [{"key": "a", "queue": "pyq"}]})
        r1 = await c.run_ritual("py-onboard", {"who": "ada"})
        assert (await c.run_ritual("py-onboard", {"who": "ada"}, if_open="use"))["id"] == r1["id"]
        assert (await c.goal_by_key("py-onboard-ada"))["id"] == r1["id"]
        await expect_error(c.configure_queue("pyq", order="priority"), "forbidden")

        # Artifacts: two chunks and a bit, read back checked.
        blob = bytes(range(256)) * 2100  # 537,600 bytes
        info = await c.put_artifact(blob, name="blob.bin", type="application/octet-stream")
        assert info["size"] == len(blob), info
        assert await c.get_artifact(info["sha256"]) == blob
        await expect_error(c.get_artifact("NOT-A-DIGEST"), "invalid", "/sha256")
    print("live client: ok in %.1fs" % (time.monotonic() - t0))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        print("live client: FAILED:", e, file=sys.stderr)
        raise
