"""Client.decide_approval without a server: it signs only the action it
checked, with the key file's key, and sends what the service verifies."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import tempfile
import unittest
from typing import Any, Dict, List, Optional, Tuple, Union

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat  # noqa: E402

import dwr  # noqa: E402
from dwr._canonical import canonical_json, loads_as_written  # noqa: E402
from dwr.client import decision_message  # noqa: E402
from dwr.credentials import read_signing_key  # noqa: E402


class FakeClient(dwr.Client):
    """A Client whose queries are answered with an approval as the service
    writes it (a dict, or the JSON text itself), and whose commands are
    recorded."""

    def __init__(self, approval: Union[Dict[str, Any], str]) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.approval = approval if isinstance(approval, str) else json.dumps(approval)
        self.sent: List[Tuple[str, Dict[str, Any]]] = []

    async def query(self, name: str, body: Any = None, *, numbers_as_written: bool = False, **kwargs: Any) -> Any:
        assert name == "approval.get", name
        return loads_as_written(self.approval) if numbers_as_written else json.loads(self.approval)

    async def command(self, name: str, body: Any = None, *, command_id: Optional[str] = None, **kwargs: Any) -> Dict[str, Any]:
        self.sent.append((name, body))
        return {"id": body["approval_id"]}


def key_file(key: Ed25519PrivateKey, header: str) -> str:
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    f = tempfile.NamedTemporaryFile("w", suffix=".key", delete=False)
    f.write(header + pem)
    f.close()
    return f.name


class DecideApprovalTest(unittest.IsolatedAsyncioTestCase):
    async def test_signs_the_checked_digest_with_the_files_key(self) -> None:
        key = Ed25519PrivateKey.generate()
        path = key_file(key, "# approver: ada\n# workspace: default\n")
        self.addCleanup(os.remove, path)
        action = {"refund": {"order": "A-17", "cents": 1250}}
        c = FakeClient({"id": "T-1", "action": action, "action_digest": dwr.action_digest(action)})
        await c.decide_approval("T-1", "approve", path, comment="ok")
        self.assertEqual(len(c.sent), 1)
        name, body = c.sent[0]
        self.assertEqual(name, "approval.decide")
        self.assertEqual(body["approver"], "ada", "the file's approver")
        self.assertEqual(body["action_digest"], dwr.action_digest(action))
        self.assertEqual(body["comment"], "ok")
        # The signature verifies as the service verifies it.
        key.public_key().verify(base64.b64decode(body["signature"]),
                                decision_message("T-1", "approve", body["action_digest"]))
        await c.decide_approval("T-1", "reject", path, approver="bob")
        self.assertEqual(c.sent[1][1]["approver"], "bob", "approver= overrides the file's")

    async def test_digests_the_numbers_as_the_service_wrote_them(self) -> None:
        # The service keeps a number's digits as written: 1e21 is not 1e+21
        # (what Python writes again), nor 1.50 1.5.
        key = Ed25519PrivateKey.generate()
        path = key_file(key, "# approver: ada\n")
        self.addCleanup(os.remove, path)
        action = '{"wire": {"amount": 1e21, "rate": 1.50, "n": 12345678901234567890}}'
        digest = "sha256:" + hashlib.sha256(canonical_json(action)).hexdigest()
        self.assertNotEqual(digest, dwr.action_digest(json.loads(action)), "Python writes these numbers otherwise")
        c = FakeClient('{"id": "T-1", "action": %s, "action_digest": "%s"}' % (action, digest))
        await c.decide_approval("T-1", "approve", path)
        self.assertEqual(c.sent[0][1]["action_digest"], digest)
        key.public_key().verify(base64.b64decode(c.sent[0][1]["signature"]), decision_message("T-1", "approve", digest))

    async def test_refuses_to_sign_an_action_that_is_not_the_digests(self) -> None:
        key = Ed25519PrivateKey.generate()
        path = key_file(key, "# approver: ada\n")
        self.addCleanup(os.remove, path)
        c = FakeClient({"id": "T-1", "action": {"cents": 9999}, "action_digest": dwr.action_digest({"cents": 1})})
        with self.assertRaisesRegex(ValueError, "not signing"):
            await c.decide_approval("T-1", "approve", path)
        self.assertEqual(c.sent, [], "nothing was sent")

    def test_a_file_without_a_key_or_an_approver(self) -> None:
        f = tempfile.NamedTemporaryFile("w", suffix=".key", delete=False)
        f.write("# approver: ada\nnot a key\n")
        f.close()
        self.addCleanup(os.remove, f.name)
        with self.assertRaisesRegex(ValueError, "holds no PEM"):
            read_signing_key(f.name)
        path = key_file(Ed25519PrivateKey.generate(), "")
        self.addCleanup(os.remove, path)
        key, named = read_signing_key(path)
        self.assertEqual(named, "")


if __name__ == "__main__":
    unittest.main()
