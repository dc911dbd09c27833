"""Unit tests of dwr._seal: HChaCha20, and values the Go code sealed."""

from __future__ import annotations

import base64
import json
import unittest

from dwr._seal import DataKey, SealError, hchacha20, open_all, parse_queue_scope, scopes

# Sealed by the Go code (schemas/seal: NewDataKey(RAW).Seal(ws, scope,
# payload)); TestSealedValuesStayAsOtherSDKsOpenThem pins the same values
# there, so that a change of the format fails on both sides.
RAW = bytes(range(32))
GO_SEALED = [
    ("default", "q.20424", '{"secret":"secret-a","n":[1,2.5,null,true]}',
     "dwr:sealed:1:q.20424:KtkPWt-uRVZ9qZRxVsMOuB6cadrg5LXVXZsTGBVMd6uX9Yg4Wf5_RDXm7w-X9hZIbjteSufCa6Iy-NbfMqpT6JUoRe156eUcywboAxAJk2vm8cw"),
    ("default", "q.20424", '"é\\u2028 \\"x\\""',
     "dwr:sealed:1:q.20424:4Yj-CLq0uBe87wT8ON0JRGOZCOAAzvb293VBa8br5nPw5AzT0IVUyFEcdyZEwB3GeNdYDedwmxM"),
    ("default", "q.20424", "[]", "dwr:sealed:1:q.20424:8dnxRE1e1KOKqKW6ohVgR8HItAkR2VIGHwGDjkTqMUfqmkHmx6T5NUeS"),
    ("ws-2", "g.01JGOAL", "42", "dwr:sealed:1:g.01JGOAL:yAUW8hkN2McVb8eK1jgONUz2TGilDKfWaYEeJksV_Gjok0ZI5DqE2OAC"),
]


def _body(sealed: str) -> bytes:
    return sealed.rsplit(":", 1)[1].encode()


class HChaCha20Test(unittest.TestCase):
    def test_the_drafts_vector(self) -> None:
        # draft-irtf-cfrg-xchacha-03, section 2.2.1.
        key = bytes(range(32))
        nonce = bytes.fromhex("000000090000004a0000000031415927")
        want = bytes.fromhex("82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc")
        self.assertEqual(want, hchacha20(key, nonce))

    def test_sizes(self) -> None:
        with self.assertRaises(ValueError):
            hchacha20(bytes(31), bytes(16))
        with self.assertRaises(ValueError):
            hchacha20(bytes(32), bytes(24))


class OpenTest(unittest.TestCase):
    def test_values_the_go_code_sealed(self) -> None:
        k = DataKey(RAW)
        for ws, scope, plain, sealed in GO_SEALED:
            self.assertEqual(plain.encode(), k.open(ws, scope, _body(sealed)), sealed)

    def test_a_value_opens_only_in_its_workspace_and_scope_with_its_key(self) -> None:
        ws, scope, _, sealed = GO_SEALED[0]
        body = _body(sealed)
        for ws2, scope2, raw in ((ws + "x", scope, RAW), (ws, "q.20425", RAW), (ws, scope, bytes(32))):
            with self.assertRaises(SealError):
                DataKey(raw).open(ws2, scope2, body)
        tampered = bytearray(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
        for i in (0, 23, 24, len(tampered) - 1):  # the nonce, the ciphertext, the tag
            t = bytearray(tampered)
            t[i] ^= 1
            with self.assertRaises(SealError):
                DataKey(RAW).open_bytes(ws, scope, bytes(t))
        for bad in (b"", b"AAAA", b"not base64!", body[:-1] + b"=", body[:39]):
            with self.assertRaises(SealError, msg=bad):
                DataKey(RAW).open(ws, scope, bad)
        with self.assertRaises(ValueError):
            DataKey(bytes(31))

    def test_open_all_replaces_each_sealed_value(self) -> None:
        ws = "default"
        a, b, c = (s for _, _, _, s in GO_SEALED[:3])
        doc = json.dumps({"task": {"spec": {"input": a}}, "text": 'a "%s" in a string' % a,
                          "dependencies": [{"result": b}, {"result": c}, {"result": None}]}).encode()
        self.assertEqual(["q.20424"], scopes(doc))
        asked = []

        def key(scope: str) -> DataKey:
            asked.append(scope)
            return DataKey(RAW)
        got = json.loads(open_all(doc, ws, key))
        self.assertEqual({"secret": "secret-a", "n": [1, 2.5, None, True]}, got["task"]["spec"]["input"])
        self.assertEqual('a "%s" in a string' % a, got["text"], "text in a string is left as it is")
        self.assertEqual(['é\u2028 "x"', [], None], [d["result"] for d in got["dependencies"]])
        self.assertEqual(["q.20424"] * 3, asked)
        plain = b'{"a":1}'
        self.assertIs(plain, open_all(plain, ws, key))
        self.assertEqual([], scopes(plain))

    def test_scopes(self) -> None:
        doc = json.dumps([GO_SEALED[0][3], GO_SEALED[3][3], GO_SEALED[1][3]]).encode()
        self.assertEqual(["q.20424", "g.01JGOAL"], scopes(doc))
        self.assertEqual([""], scopes(b'["dwr:sealed:1:nocolon"]'))
        with self.assertRaises(SealError):
            open_all(b'["dwr:sealed:1:nocolon"]', "default", lambda s: DataKey(RAW))
        with self.assertRaises(SealError):  # a value of another workspace
            open_all(json.dumps([GO_SEALED[3][3]]).encode(), "default", lambda s: DataKey(RAW))

    def test_queue_scopes(self) -> None:
        self.assertEqual(20424, parse_queue_scope("q.20424"))
        self.assertEqual(0, parse_queue_scope("q.0"))
        for bad in ("w", "g.01ABC", "q.", "q.-1", "q.01", "q.1x", "q", "q.1\n", " q.1", "q.١"):
            self.assertIsNone(parse_queue_scope(bad), bad)


if __name__ == "__main__":
    unittest.main()
