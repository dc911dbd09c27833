"""Unit tests of the protocol layer: nkeys, credentials, NATS header blocks
and message parsing, canonical JSON. Run: python3 -m unittest discover -s tests
(from executors/python), or go test -run TestPythonSDKUnit ./integration/."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import sys
import tempfile
import unittest

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from dwr import _nats
from dwr._canonical import action_digest, canonical_json
from dwr._nkeys import KeyPair, NkeyError, PREFIX_USER, crc16, encode_seed, find_user_seed
from dwr.client import _parse_time
from dwr.credentials import read_credentials
from dwr.errors import DwrError
from dwr.worker import _ack_meta, _duration_seconds, _running_from_item

# Made with github.com/nats-io/nkeys (CreateUser, Seed, PublicKey, Sign).
GO_SEED = "SUAMERSBDHGIRR7DGYQFN7OUK3A72S53QAZVPPHPJR36CEDMDHC7MJ73ZA"
GO_PUBLIC = "UBG5K4FLLNXE2GVMRPC7HA37W7AMS4G3FYTZY4DFA24LMMOTKTFBDZEV"
GO_SIG_OF_NONCE_123 = ("538eb28c37fc4fa0e66c12e145cd15ba850717a4b2612ec4356c6a599e5f3b44"
                       "814ad7dec86bc4a46d2ea37b6a26a1de78473cd57f6ad9904cb068fd11df2601")


class NkeysTest(unittest.TestCase):
    def test_a_go_made_seed_decodes_to_its_public_key_and_signs_alike(self) -> None:
        kp = KeyPair.from_seed(GO_SEED)
        self.assertEqual(kp.public_key, GO_PUBLIC)
        self.assertEqual(kp.sign(b"nonce-123").hex(), GO_SIG_OF_NONCE_123)

    def test_crc16_is_xmodem(self) -> None:
        self.assertEqual(crc16(b"123456789"), 0x31C3)

    def test_a_seed_with_a_changed_character_is_refused(self) -> None:
        bad = GO_SEED[:10] + ("A" if GO_SEED[10] != "A" else "B") + GO_SEED[11:]
        with self.assertRaisesRegex(NkeyError, "checksum"):
            KeyPair.from_seed(bad)

    def test_a_public_key_is_not_a_seed(self) -> None:
        with self.assertRaises(NkeyError):
            KeyPair.from_seed(GO_PUBLIC)

    def test_round_trip(self) -> None:
        seed = os.urandom(32)
        kp = KeyPair.from_seed(encode_seed(PREFIX_USER, seed))
        self.assertTrue(kp.public_key.startswith("U"))
        raw = base64.b32decode(kp.public_key + "=" * (-len(kp.public_key) % 8))
        Ed25519PublicKey.from_public_bytes(raw[1:33]).verify(kp.sign(b"x"), b"x")


class CredentialsTest(unittest.TestCase):
    def write(self, text: str) -> str:
        f = tempfile.NamedTemporaryFile("w", suffix=".creds", delete=False)
        f.write(text)
        f.close()
        self.addCleanup(os.unlink, f.name)
        return f.name

    def test_a_dwr_credential_file(self) -> None:
        path = self.write("# dwr credential: executor pay-1\n# identity %s\n# Keep it secret\n%s\n" % (GO_PUBLIC, GO_SEED))
        c = read_credentials(path)
        self.assertEqual(c.public_key, GO_PUBLIC)
        self.assertEqual(c.inbox_prefix, "_INBOX." + GO_PUBLIC)
        self.assertNotIn(GO_SEED, repr(c), "the seed is not shown")

    def test_a_decorated_seed(self) -> None:
        path = self.write("-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n" % GO_SEED)
        self.assertEqual(read_credentials(path).public_key, GO_PUBLIC)

    def test_a_file_without_a_seed_is_refused_naming_it(self) -> None:
        path = self.write("# nothing here\n")
        with self.assertRaisesRegex(ValueError, "credential .*no user nkey seed"):
            read_credentials(path)

    def test_find_user_seed_ignores_a_seed_glued_to_other_text(self) -> None:
        with self.assertRaises(NkeyError):
            find_user_seed("X" + GO_SEED + "Y")


class HeadersTest(unittest.TestCase):
    def test_a_status_block(self) -> None:
        h, status, desc = _nats.parse_headers(b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1\r\n\r\n")
        self.assertEqual(status, "408")
        self.assertEqual(desc, "Request Timeout")
        self.assertEqual(h, {"Nats-Pending-Messages": "1"})

    def test_a_plain_block_keeps_the_first_value(self) -> None:
        h, status, _ = _nats.parse_headers(b"NATS/1.0\r\nDwr-Chunk-Seq: 7\r\nA: 1\r\nA: 2\r\n\r\n")
        self.assertIsNone(status)
        self.assertEqual(h, {"Dwr-Chunk-Seq": "7", "A": "1"})

    def test_a_block_without_the_version_is_refused(self) -> None:
        with self.assertRaises(_nats.NatsError):
            _nats.parse_headers(b"HTTP/1.1 200\r\n\r\n")

    def test_encode_round_trips(self) -> None:
        block = _nats.encode_headers({"Dwr-Command-Id": "claim.01K.1.1", "Dwr-Min-Seq": "42"})
        self.assertTrue(block.endswith(b"\r\n\r\n"))
        h, status, _ = _nats.parse_headers(block)
        self.assertIsNone(status)
        self.assertEqual(h, {"Dwr-Command-Id": "claim.01K.1.1", "Dwr-Min-Seq": "42"})

    def test_encode_refuses_line_breaks(self) -> None:
        with self.assertRaises(ValueError):
            _nats.encode_headers({"A": "1\r\nB: 2"})


async def _client_of_server_sending(test: unittest.IsolatedAsyncioTestCase, data: bytes) -> _nats.Client:
    """Connects to a scripted server (_ScriptedServer) that answers the
    handshake and the response mux's SUB, then sends data and reads until the
    client hangs up; returns the client once its connection closed, or after
    two seconds."""

    async def send(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # the response mux's SUB
        writer.write(data)
        await writer.drain()
        await reader.read()  # until the client hangs up

    nc = await _nats.connect(await _ScriptedServer([send]).start(test))
    for _ in range(100):
        if nc.is_closed:
            break
        await asyncio.sleep(0.02)
    return nc


class FakeServerTest(unittest.IsolatedAsyncioTestCase):
    """The client against a scripted server on a local socket: CONNECT with
    the nonce signed, MSG and HMSG parsing, request/reply on the inbox."""

    async def test_connect_sign_and_request(self) -> None:
        seen = {}
        done = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b'INFO {"server_id":"x","nonce":"nonce-123","headers":true,"max_payload":1048576}\r\n')
            connect = await reader.readline()
            seen["connect"] = connect
            ping = await reader.readline()
            self.assertEqual(ping, b"PING\r\n")
            writer.write(b"PONG\r\n")
            sub = await reader.readline()  # the response mux's SUB
            seen["sub"] = sub
            pub = await reader.readline()
            seen["pub"] = pub
            hdr_len, total = map(int, pub.split()[-2:])
            body = await reader.readexactly(total + 2)
            seen["hdrs"] = body[:hdr_len]
            reply = pub.split()[2].decode()
            sid = sub.split()[-1].decode()
            payload = b'{"ok":true,"result":{"id":"t1"},"seq":9}'
            hdr = b"NATS/1.0\r\nDwr-Log-Seq: 9\r\n\r\n"
            writer.write(("HMSG %s %s %d %d\r\n" % (reply, sid, len(hdr), len(hdr) + len(payload))).encode() + hdr + payload + b"\r\n")
            seen["size"] = len(reply) + len(hdr) + len(payload)
            # a request to a subject nobody serves: status 503
            pub2 = await reader.readline()
            await reader.readexactly(int(pub2.split()[-1]) + 2)
            st = b"NATS/1.0 503\r\n\r\n"
            writer.write(("HMSG %s %s %d %d\r\n" % (pub2.split()[2].decode(), sid, len(st), len(st))).encode() + st + b"\r\n")
            await writer.drain()
            await done.wait()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        nc = _nats.Client()
        await nc.connect("nats://127.0.0.1:%d" % port, nkey_seed=GO_SEED, inbox_prefix="_INBOX." + GO_PUBLIC)
        import json

        opts = json.loads(seen["connect"][len(b"CONNECT "):])
        self.assertEqual(opts["nkey"], GO_PUBLIC)
        sig = base64.urlsafe_b64decode(opts["sig"] + "=" * (-len(opts["sig"]) % 4))
        self.assertEqual(sig.hex(), GO_SIG_OF_NONCE_123, "the nonce is signed with the seed")
        self.assertNotIn("=", opts["sig"], "base64url without padding")
        self.assertTrue(opts["headers"] and opts["no_responders"])
        self.assertEqual(opts["protocol"], 1)

        msg = await nc.request("dwr.cmd.default.task.create", b"{}", headers={"Dwr-Command-Id": "c1"}, timeout=2)
        self.assertEqual(msg.headers, {"Dwr-Log-Seq": "9"})
        self.assertEqual(msg.size, seen["size"], "its size as a pull's max_bytes counts it: subject, reply, headers, payload")
        self.assertEqual(json.loads(msg.data)["result"], {"id": "t1"})
        self.assertIn(b"Dwr-Command-Id: c1\r\n", seen["hdrs"])
        self.assertTrue(seen["sub"].startswith(b"SUB _INBOX." + GO_PUBLIC.encode() + b"."), seen["sub"])
        with self.assertRaises(_nats.NoRespondersError):
            await nc.request("dwr.cmd.default.nobody", b"{}", timeout=2)
        done.set()
        await nc.close()
        server.close()
        await server.wait_closed()

    async def test_a_refused_connection_says_why(self) -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b'INFO {"server_id":"x","nonce":"n"}\r\n')
            await reader.readline()
            writer.write(b"-ERR 'Authorization Violation'\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with self.assertRaisesRegex(_nats.NatsError, "Authorization Violation"):
            await _nats.connect("nats://127.0.0.1:%d" % port, nkey_seed=GO_SEED)
        server.close()
        await server.wait_closed()

    async def test_an_oversized_message_line_is_refused(self) -> None:
        nc = await _client_of_server_sending(self, b"MSG a 1 %d\r\n" % (_nats.MAX_PAYLOAD_CEILING + 1))
        self.assertTrue(nc.is_closed, "a message beyond the bound closes the connection")
        self.assertIn("out of bounds", nc.last_error or "")


class LongLineTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_control_line_beyond_the_bound_closes_the_connection(self) -> None:
        nc = await _client_of_server_sending(self, b"MSG " + b"a" * (_nats.MAX_CONTROL_LINE + 10))  # no line end
        self.assertTrue(nc.is_closed)
        self.assertIn("too long", nc.last_error or "")


class CanonicalTest(unittest.TestCase):
    # The service's fixed answers (schemas/approval_test.go TestActionDigest).
    VECTORS = {
        '{"b":2,"a":1}': "sha256:43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777",
        '{ "to": "ada@example.com", "amount": 1.50, "tags": ["<b>", "x&y"], "n": 1e3, "nested": {"z": null, "y": [true, false]} }':
            "sha256:9bbbe27c4f07cd5a74eb44c0abcece75eca454bb564c8822f4cc2f9feeb58603",
        '"caf\\u00e9 \\u2028 <script>"': "sha256:2052267902a999d7478786262951e2cb256c9d22416a1764678599262fc5c1c0",
        "[1, 10.0, -0, 12345678901234567890]": "sha256:28bf6a6c5d5c3f46df04e4f44d6d18e6c3461320751065631a12d39aa1eafb92",
        "null": "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
        '{"refund":{"order":"A-17","cents":1250}}': "sha256:79b413d8bddc4b91c41c2aefe93000b54f8fcc307c08de8d3217653d0a80cf3e",
    }

    def test_the_service_digests(self) -> None:
        for doc, want in self.VECTORS.items():
            self.assertEqual(action_digest(doc.encode()), want, doc)

    def test_a_python_value_digests_as_its_json(self) -> None:
        self.assertEqual(action_digest({"refund": {"order": "A-17", "cents": 1250}}),
                         self.VECTORS['{"refund":{"order":"A-17","cents":1250}}'])

    def test_numbers_as_written(self) -> None:
        self.assertEqual(canonical_json(b'{"b": 1.50, "a": 1e3}'), b'{"a":1e3,"b":1.50}')

    def test_two_values_are_refused(self) -> None:
        with self.assertRaises(ValueError):
            canonical_json(b'{"a":1} {"b":2}')


class WireTest(unittest.TestCase):
    def test_ack_subject_layouts(self) -> None:
        self.assertEqual(_ack_meta("$JS.ACK.DWR_WORK.dwr-default-q.3.10.7.1700000000000000000.0"), (3, 1700000000.0))
        self.assertEqual(_ack_meta("$JS.ACK.dom.hash.DWR_WORK.dwr-default-q.2.10.7.1700000000000000000.0.rand"),
                         (2, 1700000000.0))
        self.assertEqual(_ack_meta("_INBOX.x.y"), (1, 0.0), "unreadable: a first delivery, long published")

    def test_durations(self) -> None:
        self.assertEqual(_duration_seconds("1m30s"), 90.0)
        self.assertAlmostEqual(_duration_seconds("250ms"), 0.25)
        self.assertEqual(_duration_seconds(2), 2.0, "a number is seconds")
        self.assertEqual(_duration_seconds("soon"), 0.0)

    def test_rfc3339_with_nanoseconds(self) -> None:
        self.assertAlmostEqual(_parse_time("2026-01-02T03:04:05.123456789Z"), 1767323045.123456, places=5)

    def test_running_from_item(self) -> None:
        t = {"state": "running", "attempts": [{"n": 1, "state": "abandoned"}, {"n": 2, "state": "running"}]}
        self.assertEqual(_running_from_item(t, 1), {"n": 2, "state": "running"})
        t["attempts"][0]["state"] = "failed"
        self.assertIsNone(_running_from_item(t, 1), "an attempt after a failure came from another item")

    def test_error_of_a_refusal(self) -> None:
        e = DwrError.from_reply({"code": "invalid", "message": "bad", "fields": [{"pointer": "/spec/queue", "message": "x"}]})
        self.assertEqual((e.code, e.message, e.field), ("invalid", "bad", "/spec/queue"))
        self.assertEqual(DwrError.from_reply(None).code, "internal")


if __name__ == "__main__":
    unittest.main()


class _ScriptedServer:
    """A NATS server scripted per connection on a local socket: each
    connection is handed to the next handler of handlers (reader, writer),
    after INFO and the handshake's CONNECT and PING have been read and
    answered; what the client sent is kept in lines."""

    def __init__(self, handlers, info: bytes = b'{"server_id":"x"}', tls=None) -> None:
        self.handlers = list(handlers)
        self.info = info
        self.tls = tls
        self.connects = []

    async def start(self, test: unittest.IsolatedAsyncioTestCase) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

        async def stop() -> None:
            self.server.close()
            await self.server.wait_closed()

        test.addAsyncCleanup(stop)
        return "nats://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.handlers:
            writer.close()
            return
        handler = self.handlers.pop(0)
        writer.write(b"INFO " + self.info + b"\r\n")
        await writer.drain()
        if self.tls is not None:
            try:
                await writer.start_tls(self.tls)
            except (OSError, ssl.SSLError):
                return  # the client refused the certificate
        self.connects.append(await reader.readline())
        await reader.readline()  # PING
        writer.write(b"PONG\r\n")
        await writer.drain()
        try:
            await handler(reader, writer)
        finally:
            writer.close()


async def _read_sub_lines(reader: asyncio.StreamReader, n: int) -> list:
    return [await reader.readline() for _ in range(n)]


class ReconnectTest(unittest.IsolatedAsyncioTestCase):
    """A connection that is lost is made again: CONNECT anew, every
    subscription again, and what was published meanwhile sent after them."""

    async def test_a_lost_connection_is_made_again(self) -> None:
        first_subs = []
        lost = asyncio.Event()
        second = {}
        done = asyncio.Event()

        async def first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            first_subs.extend(await _read_sub_lines(reader, 2))  # the response mux, then the test's
            lost.set()  # and hang up

        async def again(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            second["subs"] = await _read_sub_lines(reader, 2)
            second["pub"] = await reader.readline()
            second["body"] = await reader.readline()
            sid = second["subs"][1].split()[-1]
            writer.write(b"MSG events.x " + sid + b" 5\r\nhello\r\n")
            await writer.drain()
            await done.wait()

        srv = _ScriptedServer([first, again])
        url = await srv.start(self)
        nc = await _nats.connect(url, reconnect_time_wait=0.05, ping_interval=0)
        back = asyncio.Event()
        nc.reconnected_cbs.append(back.set)
        sub = await nc.subscribe("events.>")
        await lost.wait()
        for _ in range(200):  # the loss is seen
            if nc.is_reconnecting or back.is_set():
                break
            await asyncio.sleep(0.01)
        await nc.publish("meanwhile", b"kept")
        await asyncio.wait_for(back.wait(), 5)
        msg = await sub.next_msg(5)
        self.assertEqual(msg.data, b"hello")
        self.assertEqual(second["subs"][0].split()[1], first_subs[0].split()[1], "the same response mux")
        self.assertEqual(second["subs"][1], first_subs[1], "the subscription again, with its sid")
        self.assertEqual(second["pub"], b"PUB meanwhile 4\r\n")
        self.assertEqual(second["body"], b"kept\r\n")
        self.assertEqual(len(srv.connects), 2, "CONNECT again")
        self.assertFalse(nc.is_closed)
        done.set()
        await nc.close()

    async def test_it_closes_after_its_tries(self) -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()  # the response mux's SUB

        srv = _ScriptedServer([hang_up])  # later connections are closed at once
        url = await srv.start(self)
        nc = await _nats.connect(url, reconnect_time_wait=0.01, max_reconnect_attempts=3, ping_interval=0)
        for _ in range(500):
            if nc.is_closed:
                break
            await asyncio.sleep(0.01)
        self.assertTrue(nc.is_closed, "closed once its tries failed")
        with self.assertRaises(_nats.ConnectionClosedError):
            await nc.publish("after", b"x")

    async def test_no_reconnection_when_asked_for_none(self) -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()

        url = await _ScriptedServer([hang_up]).start(self)
        nc = await _nats.connect(url, allow_reconnect=False, ping_interval=0)
        for _ in range(200):
            if nc.is_closed:
                break
            await asyncio.sleep(0.01)
        self.assertTrue(nc.is_closed)

    async def test_unanswered_pings_count_as_a_lost_connection(self) -> None:
        back = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers a PING

        async def answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await back.wait()

        url = await _ScriptedServer([silent, answering]).start(self)
        nc = await _nats.connect(url, reconnect_time_wait=0.01, ping_interval=0.05)
        nc.reconnected_cbs.append(back.set)
        await asyncio.wait_for(back.wait(), 5)
        await nc.close()


@unittest.skipIf(sys.version_info < (3, 11), "TLS needs Python 3.11")
class TLSTest(unittest.IsolatedAsyncioTestCase):
    async def test_a_server_that_requires_tls(self) -> None:
        from dwr.credentials import tls_context

        ca, server_ctx = _tls_files(self)
        connected = asyncio.Event()

        async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connected.set()
            await reader.readline()

        srv = _ScriptedServer([ok, ok], info=b'{"server_id":"x","tls_required":true}', tls=server_ctx)
        url = await srv.start(self)
        nc = await _nats.connect(url, tls=tls_context(ca=ca), ping_interval=0)
        await asyncio.wait_for(connected.wait(), 5)
        self.assertTrue(json.loads(srv.connects[0][len(b"CONNECT "):])["tls_required"])
        await nc.close()
        # Without the CA, the server's certificate is not trusted.
        with self.assertRaisesRegex(_nats.NatsError, "could not connect"):
            await _nats.connect(url, ping_interval=0)

    async def test_tls_asked_for_and_not_offered_is_refused(self) -> None:
        async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()

        url = await _ScriptedServer([ok]).start(self)
        with self.assertRaisesRegex(_nats.NatsError, "does not offer TLS"):
            await _nats.connect(url.replace("nats://", "tls://"), ping_interval=0)


def _tls_files(test: unittest.TestCase):
    """A CA certificate file and a server context with a certificate for
    127.0.0.1 it signed."""
    import datetime
    import ipaddress
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, key, sign_key, ca):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
             .not_valid_after(now + datetime.timedelta(hours=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return b.sign(sign_key, hashes.SHA256())

    ca_key, srv_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test ca")])
    ca_cert = cert(ca_name, ca_name, ca_key, ca_key, True)
    srv_cert = cert(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), ca_name, srv_key, ca_key, False)
    d = tempfile.mkdtemp()
    test.addCleanup(lambda: [os.unlink(os.path.join(d, f)) for f in os.listdir(d)] and os.rmdir(d))
    pem = serialization.Encoding.PEM
    paths = {n: os.path.join(d, n) for n in ("ca.pem", "srv.pem", "srv.key")}
    with open(paths["ca.pem"], "wb") as f:
        f.write(ca_cert.public_bytes(pem))
    with open(paths["srv.pem"], "wb") as f:
        f.write(srv_cert.public_bytes(pem))
    with open(paths["srv.key"], "wb") as f:
        f.write(srv_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(paths["srv.pem"], paths["srv.key"])
    return paths["ca.pem"], ctx
