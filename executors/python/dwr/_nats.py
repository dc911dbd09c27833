"""A minimal asyncio client of the NATS protocol: what dwr needs of nats-py.

nats-py could not be installed where this package was written (no PyPI), so
the package carries this small client. Its surface follows nats-py's —
``connect``, ``publish``, ``subscribe``, ``request``, ``flush``, ``drain``,
``close``, ``new_inbox`` and messages with ``subject``, ``reply``, ``data``,
``headers`` — so that switching to nats-py later is a swap.

It speaks the text protocol (INFO, CONNECT, PUB/HPUB, SUB/UNSUB, MSG/HMSG,
PING/PONG, +OK/-ERR) over one TCP connection, authenticates with an nkey
(the server's nonce signed with the user's Ed25519 seed), and answers
requests on one wildcard subscription of the connection's inbox, as nats.go's
response multiplexer does. It speaks TLS (``tls://``, a server that requires
it, or an ``ssl.SSLContext`` given; Python 3.11 or later) and, as nats.go and
nats-py do, reconnects when the connection is lost: every 2 s (with jitter),
up to 60 tries over the servers given, subscriptions made again, what is
published meanwhile kept (up to 8 MiB) and sent once connected. A protocol
error from the server closes the connection for good.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import secrets
import ssl
import sys
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Dict, List, Optional
from urllib.parse import urlparse

from ._nkeys import KeyPair

log = logging.getLogger("dwr.nats")

__all__ = [
    "Client",
    "Msg",
    "Subscription",
    "NatsError",
    "TimeoutError",
    "NoRespondersError",
    "ConnectionClosedError",
    "PermissionsViolation",
    "parse_headers",
    "encode_headers",
    "MAX_CONTROL_LINE",
]

# MAX_CONTROL_LINE bounds a protocol line read from the server, checked
# before it is parsed (nats-server's own bound is 4 KiB).
MAX_CONTROL_LINE = 64 * 1024
# The largest message accepted from the server, whatever its INFO says.
MAX_PAYLOAD_CEILING = 64 * 1024 * 1024

HEADER_LINE = b"NATS/1.0"

# Reconnection, as nats.go's and nats-py's defaults: tries, the wait between
# rounds over the servers, and what is kept of what is published meanwhile.
MAX_RECONNECT_ATTEMPTS = 60
RECONNECT_TIME_WAIT = 2.0
RECONNECT_BUF_SIZE = 8 * 1024 * 1024
# A PING every ping_interval; a connection with this many unanswered is
# taken for lost.
PING_INTERVAL = 120.0
MAX_OUTSTANDING_PINGS = 2


class NatsError(Exception):
    """A NATS protocol or connection error."""


class TimeoutError(NatsError, asyncio.TimeoutError):  # noqa: A001 - nats-py's name
    """A request was not answered in time."""


class NoRespondersError(NatsError):
    """Nobody subscribes to the subject of a request (status 503)."""


class ConnectionClosedError(NatsError):
    """The connection is closed."""


class PermissionsViolation(NatsError):
    """The server refused this connection the subject of a publish."""


@dataclass
class Msg:
    """A message received (or a reply): its subject, reply subject, payload
    and headers. ``status`` is the status of a status message ("503",
    "408", ...), with ``description``."""

    subject: str
    reply: str = ""
    data: bytes = b""
    headers: Optional[Dict[str, str]] = None
    status: Optional[str] = None
    description: str = ""
    size: int = 0  # as a JetStream pull's max_bytes counts it: subject, reply, headers and payload
    _client: Optional["Client"] = field(default=None, repr=False, compare=False)

    async def respond(self, data: bytes, headers: Optional[Dict[str, str]] = None) -> None:
        if not self.reply or self._client is None:
            raise NatsError("the message has no reply subject")
        await self._client.publish(self.reply, data, headers=headers)


def parse_headers(block: bytes) -> tuple[Dict[str, str], Optional[str], str]:
    """Parses a header block ("NATS/1.0[ status[ description]]\\r\\nK: V\\r\\n...\\r\\n")
    into the headers (the first value of each key), the status and its
    description. It raises NatsError when the block does not start with the
    version line."""
    lines = block.split(b"\r\n")
    first = lines[0]
    if not first.startswith(HEADER_LINE):
        raise NatsError("a header block does not start with NATS/1.0: %r" % first[:40])
    status: Optional[str] = None
    description = ""
    rest = first[len(HEADER_LINE):].strip()
    if rest:
        parts = rest.split(b" ", 1)
        status = parts[0].decode("ascii", "replace")
        if len(parts) > 1:
            description = parts[1].decode("utf-8", "replace").strip()
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(b":")
        if not sep:
            raise NatsError("a header line without ':': %r" % line[:40])
        k = key.decode("utf-8", "replace").strip()
        if k not in headers:
            headers[k] = value.decode("utf-8", "replace").strip()
    return headers, status, description


def encode_headers(headers: Dict[str, str]) -> bytes:
    """Encodes headers as a NATS/1.0 header block. It raises ValueError for
    a key or value holding a line break, or a key holding ':'."""
    out = [HEADER_LINE]
    for k, v in headers.items():
        if any(c in k for c in ":\r\n") or not k or any(c in v for c in "\r\n"):
            raise ValueError("header %r: keys may not hold ':' or line breaks, values no line breaks" % k)
        out.append(k.encode() + b": " + v.encode())
    return b"\r\n".join(out) + b"\r\n\r\n"


def _check_subject(subject: str, what: str = "subject") -> None:
    if not subject or any(c in subject for c in " \t\r\n"):
        raise ValueError("%s %r is not a valid NATS subject" % (what, subject))


class Subscription:
    """A subscription: messages go to its callback, or are read with
    ``next_msg`` or ``async for``."""

    def __init__(self, client: "Client", sid: int, subject: str, queue: str,
                 cb: Optional[Callable[[Msg], Awaitable[None]]]) -> None:
        self._client = client
        self.sid = sid
        self.subject = subject
        self.queue = queue
        self._cb = cb
        self._queue: "asyncio.Queue[Optional[Msg]]" = asyncio.Queue()
        self._closed = False

    def _deliver(self, msg: Msg) -> None:
        if self._closed:
            return
        if self._cb is not None:
            task = asyncio.get_running_loop().create_task(self._cb(msg))
            self._client._tasks.add(task)
            task.add_done_callback(self._client._task_done)
        else:
            self._queue.put_nowait(msg)

    async def next_msg(self, timeout: Optional[float] = 1.0) -> Msg:
        """The next message; TimeoutError when none comes within timeout."""
        # Not asyncio.wait_for: before Python 3.12 it can swallow a
        # cancellation that comes as the message does.
        getter = asyncio.ensure_future(self._queue.get())
        try:
            await asyncio.wait({getter}, timeout=timeout)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.cancelled() or not getter.done():
            raise TimeoutError("no message on %s within %ss" % (self.subject, timeout))
        msg = getter.result()
        if msg is None:
            raise ConnectionClosedError("the subscription ended")
        return msg

    def __aiter__(self) -> "Subscription":
        return self

    async def __anext__(self) -> Msg:
        msg = await self._queue.get()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def unsubscribe(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put_nowait(None)
        self._client._subs.pop(self.sid, None)
        if not self._client.is_closed:
            await self._client._send(b"UNSUB %d\r\n" % self.sid)

    def _end(self) -> None:
        self._closed = True
        self._queue.put_nowait(None)


class Client:
    """One connection to a NATS server. Make it with ``connect``."""

    def __init__(self) -> None:
        self._reader: Optional[asyncio.StreamReader] = None
        self._writer: Optional[asyncio.StreamWriter] = None
        self._subs: Dict[int, Subscription] = {}
        self._sid = 0
        self._pongs: List["asyncio.Future[None]"] = []
        self._resp: Dict[str, "asyncio.Future[Msg]"] = {}
        self._resp_subject: Dict[str, str] = {}
        self._resp_sub: Optional[Subscription] = None
        self._read_task: Optional["asyncio.Task[None]"] = None
        self._tasks: "set[asyncio.Task[None]]" = set()
        self._closed = False
        self._write_lock = asyncio.Lock()
        self.info: Dict[str, object] = {}
        self.inbox_prefix = "_INBOX"
        self.max_payload = 1024 * 1024
        self.last_error: Optional[str] = None
        self.error_cb: Optional[Callable[[str], None]] = None
        # Called (with no argument) when the connection was lost and again
        # when it is back; each may be a list of several.
        self.disconnected_cbs: List[Callable[[], None]] = []
        self.reconnected_cbs: List[Callable[[], None]] = []
        self._servers: List[str] = []
        self._nkey_seed: Optional[str] = None
        self._name = "dwr-python"
        self._tls: Optional[ssl.SSLContext] = None
        self._connect_timeout = 5.0
        self._allow_reconnect = True
        self._max_reconnect = MAX_RECONNECT_ATTEMPTS
        self._reconnect_wait = RECONNECT_TIME_WAIT
        self._ping_interval = PING_INTERVAL
        self._reconnecting = False
        self._pending = bytearray()  # published while reconnecting
        self._pings_out = 0
        self._ping_task: Optional["asyncio.Task[None]"] = None

    # -- connecting ---------------------------------------------------------

    async def connect(self, servers: str = "nats://127.0.0.1:4222", *, nkey_seed: Optional[str] = None,
                      inbox_prefix: Optional[str] = None, name: str = "dwr-python",
                      connect_timeout: float = 5.0, tls: Optional[ssl.SSLContext] = None,
                      allow_reconnect: bool = True, max_reconnect_attempts: int = MAX_RECONNECT_ATTEMPTS,
                      reconnect_time_wait: float = RECONNECT_TIME_WAIT,
                      ping_interval: float = PING_INTERVAL) -> None:
        """Connects to the first of servers (a URL, or several separated by
        commas) that answers, authenticating with the nkey seed when given,
        over TLS with tls (or a default context when a server requires TLS
        or its URL is tls://). When the connection is lost it reconnects
        (allow_reconnect) up to max_reconnect_attempts times (-1: without
        end), reconnect_time_wait seconds between rounds over the servers."""
        self._servers = [s.strip() for s in servers.split(",") if s.strip()]
        self._nkey_seed, self._name, self._tls, self._connect_timeout = nkey_seed, name, tls, connect_timeout
        self._allow_reconnect, self._max_reconnect = allow_reconnect, max_reconnect_attempts
        self._reconnect_wait, self._ping_interval = reconnect_time_wait, ping_interval
        errors = []
        for url in self._servers:
            try:
                await asyncio.wait_for(self._connect_one(url), connect_timeout)
                break
            except (OSError, asyncio.TimeoutError, NatsError) as e:
                errors.append("%s: %s" % (url, e or type(e).__name__))
                await self._abort()
        else:
            raise NatsError("could not connect: " + "; ".join(errors))
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        if inbox_prefix:
            self.inbox_prefix = inbox_prefix
        self._resp_prefix = "%s.%s." % (self.inbox_prefix, secrets.token_hex(8))
        self._resp_sub = await self.subscribe(self._resp_prefix + "*", cb=self._on_response)
        if ping_interval > 0:
            self._ping_task = asyncio.get_running_loop().create_task(self._ping_loop())

    async def _connect_one(self, url: str) -> None:
        """Opens a connection to url and completes the handshake (INFO, TLS,
        CONNECT, PING/PONG); the caller starts the read loop."""
        if "://" not in url:
            url = "nats://" + url
        u = urlparse(url)
        if u.scheme not in ("nats", "tls", ""):
            raise NatsError("scheme %r is not supported (nats:// or tls://)" % u.scheme)
        self._reader, self._writer = await asyncio.open_connection(u.hostname or "127.0.0.1", u.port or 4222,
                                                                   limit=MAX_CONTROL_LINE + 2)
        line = await self._read_line()
        if not line.startswith(b"INFO "):
            raise NatsError("the server did not start with INFO: %r" % line[:60])
        self.info = json.loads(line[5:])
        want_tls = u.scheme == "tls" or self._tls is not None
        if self.info.get("tls_required") or (want_tls and self.info.get("tls_available")):
            await self._start_tls(u.hostname or "127.0.0.1")
        elif want_tls:
            raise NatsError("%s does not offer TLS, and TLS was asked for" % url)
        mp = self.info.get("max_payload")
        if isinstance(mp, int) and mp > 0:
            self.max_payload = min(mp, MAX_PAYLOAD_CEILING)
        opts: Dict[str, object] = {"verbose": False, "pedantic": False, "lang": "python-dwr", "version": "0.1.0",
                                   "protocol": 1, "headers": True, "no_responders": True, "name": self._name,
                                   "tls_required": self._writer.get_extra_info("sslcontext") is not None}
        if self._nkey_seed is not None:
            kp = KeyPair.from_seed(self._nkey_seed)
            nonce = str(self.info.get("nonce", "")).encode()
            opts["nkey"] = kp.public_key
            opts["sig"] = base64.urlsafe_b64encode(kp.sign(nonce)).rstrip(b"=").decode()
        elif u.username:
            opts["user"], opts["pass"] = u.username, u.password or ""
        assert self._writer is not None
        self._writer.write(b"CONNECT " + json.dumps(opts).encode() + b"\r\nPING\r\n")
        await self._writer.drain()
        # The server answers PONG once it took CONNECT, or -ERR.
        while True:
            line = await self._read_line()
            if line == b"PONG":
                break
            if line.startswith(b"-ERR"):
                raise NatsError("the server refused the connection: " + line[5:].decode("utf-8", "replace").strip(" '"))
            if line == b"PING":
                self._writer.write(b"PONG\r\n")
            # INFO updates and +OK are ignored here.

    async def _start_tls(self, hostname: str) -> None:
        """Upgrades the connection to TLS, as NATS does after INFO: with the
        context given, else the system's default (its CAs)."""
        if sys.version_info < (3, 11):
            raise NatsError("TLS needs Python 3.11 or later (asyncio's StreamWriter.start_tls)")
        ctx = self._tls or ssl.create_default_context()
        assert self._writer is not None
        await self._writer.start_tls(ctx, server_hostname=hostname)

    async def _read_line(self) -> bytes:
        assert self._reader is not None
        try:
            line = await self._reader.readuntil(b"\r\n")
        except asyncio.LimitOverrunError:
            raise NatsError("a protocol line is too long") from None
        except asyncio.IncompleteReadError:
            raise ConnectionClosedError("the server closed the connection") from None
        if len(line) > MAX_CONTROL_LINE:
            raise NatsError("a protocol line is %d bytes; at most %d are read" % (len(line), MAX_CONTROL_LINE))
        return line[:-2]

    # -- reading ------------------------------------------------------------

    async def _read_loop(self) -> None:
        reader = self._reader
        assert reader is not None
        try:
            while True:
                line = await self._read_line()
                if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                    await self._read_msg(line)
                elif line == b"PING":
                    await self._send(b"PONG\r\n")
                elif line == b"PONG":
                    self._pings_out = 0
                    if self._pongs:
                        fut = self._pongs.pop(0)
                        if not fut.done():
                            fut.set_result(None)
                elif line.startswith(b"-ERR"):
                    err = line[5:].decode("utf-8", "replace").strip(" '")
                    self.last_error = err
                    self._fail_denied(err)
                    if self.error_cb is not None:
                        self.error_cb(err)
                    else:
                        log.warning("dwr: nats: server error: %s", err)
                elif line.startswith(b"INFO "):
                    try:
                        self.info.update(json.loads(line[5:]))
                    except ValueError:
                        pass
                # +OK is ignored (verbose is off).
        except (ConnectionClosedError, OSError) as e:
            # The connection is lost (not a protocol error): reconnect.
            if not self._closed:
                self.last_error = str(e) or type(e).__name__
                if self._allow_reconnect:
                    await self._reconnect()
                    return
        except NatsError as e:
            if not self._closed:
                self.last_error = str(e)
        except asyncio.CancelledError:
            pass
        await self._shut()

    async def _reconnect(self) -> None:
        """Connects again after a lost connection: rounds over the servers
        given, in their order, reconnect_time_wait apart, until one answers
        or max_reconnect_attempts tries (one a server) failed — then the
        client closes; a server refusing the credential twice in a row ends
        it too. Meanwhile
        what is published is kept (RECONNECT_BUF_SIZE), requests wait for
        their replies, and PINGs fail. Once connected it subscribes again
        to every subscription and sends what was kept, in order."""
        self._reconnecting = True
        self._fail_pongs(ConnectionClosedError("the connection was lost"))
        await self._abort()
        log.warning("dwr: nats: connection lost (%s); reconnecting", self.last_error)
        for cb in self.disconnected_cbs:
            cb()
        tries = 0
        refused = ""
        while not self._closed:
            for url in self._servers:
                if 0 <= self._max_reconnect <= tries:
                    log.error("dwr: nats: could not reconnect after %d tries (the last: %s); closing", tries, self.last_error)
                    await self._shut()
                    return
                tries += 1
                try:
                    await asyncio.wait_for(self._connect_one(url), self._connect_timeout)
                except (OSError, asyncio.TimeoutError, NatsError) as e:
                    self.last_error = "%s: %s" % (url, e or type(e).__name__)
                    await self._abort()
                    if "refused the connection" in str(e):
                        if refused == str(e):
                            log.error("dwr: nats: %s, twice; closing", e)
                            await self._shut()
                            return
                        refused = str(e)
                    continue
                if self._closed:
                    await self._abort()
                    return
                assert self._writer is not None
                for sub in self._subs.values():
                    self._writer.write(("SUB %s %s%d\r\n" % (sub.subject, sub.queue + " " if sub.queue else "", sub.sid)).encode())
                self._writer.write(bytes(self._pending))
                self._pending.clear()
                self._pings_out = 0
                self._reconnecting = False
                self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
                log.info("dwr: nats: reconnected to %s", url)
                for cb in self.reconnected_cbs:
                    cb()
                return
            await asyncio.sleep(self._reconnect_wait + random.uniform(0, self._reconnect_wait / 4))

    async def _ping_loop(self) -> None:
        """A PING every ping_interval; with MAX_OUTSTANDING_PINGS of them
        unanswered the connection is taken for lost (the read loop then
        reconnects)."""
        while not self._closed:
            await asyncio.sleep(self._ping_interval)
            if self._reconnecting or self._closed or self._writer is None:
                continue
            if self._pings_out >= MAX_OUTSTANDING_PINGS:
                log.warning("dwr: nats: %d PINGs unanswered; the connection is taken for lost", self._pings_out)
                self._writer.transport.abort()
                continue
            fut: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # nobody awaits it
            self._pongs.append(fut)
            self._pings_out += 1
            try:
                await self._send(b"PING\r\n")
            except NatsError:
                pass

    def _fail_pongs(self, err: Exception) -> None:
        for fut in self._pongs:
            if not fut.done():
                fut.set_exception(err)
        self._pongs.clear()

    async def _read_msg(self, line: bytes) -> None:
        assert self._reader is not None
        parts = line.split()
        headered = parts[0] == b"HMSG"
        try:
            if headered:
                if len(parts) == 6:
                    subj, sid, reply, hlen, tlen = parts[1], parts[2], parts[3], int(parts[4]), int(parts[5])
                elif len(parts) == 5:
                    subj, sid, reply, hlen, tlen = parts[1], parts[2], b"", int(parts[3]), int(parts[4])
                else:
                    raise ValueError
            else:
                if len(parts) == 5:
                    subj, sid, reply, tlen = parts[1], parts[2], parts[3], int(parts[4])
                elif len(parts) == 4:
                    subj, sid, reply, tlen = parts[1], parts[2], b"", int(parts[3])
                else:
                    raise ValueError
                hlen = 0
        except ValueError:
            raise NatsError("a malformed message line: %r" % line[:80]) from None
        if tlen < 0 or hlen < 0 or hlen > tlen or tlen > self.max_payload:
            raise NatsError("a message of %d bytes (headers %d) is out of bounds" % (tlen, hlen))
        try:
            body = await self._reader.readexactly(tlen + 2)
        except asyncio.IncompleteReadError:
            raise ConnectionClosedError("the server closed the connection") from None
        headers: Optional[Dict[str, str]] = None
        status: Optional[str] = None
        description = ""
        if hlen:
            headers, status, description = parse_headers(body[:hlen])
        msg = Msg(subject=subj.decode(), reply=reply.decode(), data=body[hlen:tlen], headers=headers,
                  status=status, description=description, size=len(subj) + len(reply) + tlen, _client=self)
        sub = self._subs.get(int(sid))
        if sub is not None:
            sub._deliver(msg)

    async def _on_response(self, msg: Msg) -> None:
        token = msg.subject[len(self._resp_prefix):]
        fut = self._resp.pop(token, None)
        if fut is not None and not fut.done():
            fut.set_result(msg)

    def _fail_denied(self, err: str) -> None:
        # "Permissions Violation for Publish to "dwr.cmd.x.y"": the
        # requests on that subject end at once instead of timing out.
        marker = "Permissions Violation for Publish to "
        if not err.startswith(marker):
            return
        subject = err[len(marker):].strip().strip('"')
        for token, subj in list(self._resp_subject.items()):
            fut = self._resp.get(token)
            if subj == subject and fut is not None and not fut.done():
                fut.set_exception(PermissionsViolation(err))

    def _task_done(self, task: "asyncio.Task[None]") -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("dwr: nats: a message handler failed: %r", task.exception())

    # -- writing ------------------------------------------------------------

    async def _send(self, data: bytes) -> None:
        if self._reconnecting and not self._closed:
            if len(self._pending) + len(data) > RECONNECT_BUF_SIZE:
                raise ConnectionClosedError("reconnecting, and %d bytes are already kept to send" % len(self._pending))
            self._pending += data
            return
        if self._closed or self._writer is None:
            raise ConnectionClosedError("the connection is closed")
        self._writer.write(data)
        if self._writer.transport.get_write_buffer_size() > 1 << 20:
            async with self._write_lock:
                await self._writer.drain()

    async def publish(self, subject: str, payload: bytes = b"", reply: str = "",
                      headers: Optional[Dict[str, str]] = None) -> None:
        """Publishes payload to subject, with a reply subject and headers."""
        _check_subject(subject)
        if reply:
            _check_subject(reply, "reply subject")
        size = len(payload)
        if headers:
            hdr = encode_headers(headers)
            if len(hdr) + size > self.max_payload:
                raise NatsError("the message is %d bytes; the server takes at most %d" % (len(hdr) + size, self.max_payload))
            line = "HPUB %s %s%d %d\r\n" % (subject, reply + " " if reply else "", len(hdr), len(hdr) + size)
            await self._send(line.encode() + hdr + payload + b"\r\n")
        else:
            if size > self.max_payload:
                raise NatsError("the message is %d bytes; the server takes at most %d" % (size, self.max_payload))
            line = "PUB %s %s%d\r\n" % (subject, reply + " " if reply else "", size)
            await self._send(line.encode() + payload + b"\r\n")

    async def subscribe(self, subject: str, queue: str = "",
                        cb: Optional[Callable[[Msg], Awaitable[None]]] = None) -> Subscription:
        """Subscribes to subject; with cb, each message is handed to it in a
        task of its own, else read them from the subscription."""
        _check_subject(subject)
        self._sid += 1
        sub = Subscription(self, self._sid, subject, queue, cb)
        self._subs[sub.sid] = sub
        await self._send(("SUB %s %s%d\r\n" % (subject, queue + " " if queue else "", sub.sid)).encode())
        return sub

    def new_inbox(self) -> str:
        """A fresh subject under the connection's inbox prefix."""
        return "%s.%s" % (self.inbox_prefix, secrets.token_hex(11))

    async def request(self, subject: str, payload: bytes = b"", timeout: float = 5.0,
                      headers: Optional[Dict[str, str]] = None) -> Msg:
        """Publishes a request and returns its first reply. It raises
        TimeoutError when none comes within timeout and NoRespondersError
        when nobody subscribes to subject."""
        token = secrets.token_hex(8)
        fut: "asyncio.Future[Msg]" = asyncio.get_running_loop().create_future()
        self._resp[token] = fut
        self._resp_subject[token] = subject
        try:
            await self.publish(subject, payload, reply=self._resp_prefix + token, headers=headers)
            # Not asyncio.wait_for: before Python 3.12 it can swallow a
            # cancellation that comes as the reply does.
            await asyncio.wait({fut}, timeout=timeout)
            if not fut.done():
                raise TimeoutError("no reply to %s within %ss" % (subject, timeout))
            msg = fut.result()
        finally:
            self._resp.pop(token, None)
            self._resp_subject.pop(token, None)
        if msg.status == "503" and not msg.data:
            raise NoRespondersError("no responders on " + subject)
        return msg

    async def flush(self, timeout: float = 5.0) -> None:
        """Waits until the server has processed everything sent so far."""
        fut: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._pongs.append(fut)
        await self._send(b"PING\r\n")
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise TimeoutError("the server did not answer a PING within %ss" % timeout) from None

    # -- closing ------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def is_reconnecting(self) -> bool:
        return self._reconnecting and not self._closed

    async def drain(self) -> None:
        """Unsubscribes everything, lets the server process what was sent,
        then closes."""
        if self._closed:
            return
        for sub in list(self._subs.values()):
            if sub is not self._resp_sub:
                try:
                    await sub.unsubscribe()
                except ConnectionClosedError:
                    pass
        try:
            await self.flush(2.0)
        except NatsError:
            pass
        await self.close()

    async def close(self) -> None:
        """Closes the connection."""
        if self._closed:
            return
        if self._writer is not None:
            try:
                await asyncio.wait_for(self._writer.drain(), 2.0)
            except (OSError, ConnectionError, asyncio.TimeoutError):
                pass
        await self._shut()
        for task in (self._read_task, self._ping_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

    async def _shut(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sub in list(self._subs.values()):
            sub._end()
        self._subs.clear()
        for fut in list(self._resp.values()):
            if not fut.done():
                fut.set_exception(ConnectionClosedError("the connection is closed"))
        self._resp.clear()
        self._fail_pongs(ConnectionClosedError("the connection is closed"))
        self._pending.clear()
        if self._ping_task is not None and self._ping_task is not asyncio.current_task():
            self._ping_task.cancel()
        await self._abort()

    async def _abort(self) -> None:
        w, self._writer = self._writer, None
        if w is not None:
            w.close()
            try:
                await w.wait_closed()
            except (OSError, ConnectionError):
                pass


async def connect(servers: str = "nats://127.0.0.1:4222", **kwargs: object) -> Client:
    """Connects to a NATS server (nats-py's ``nats.connect``): see
    Client.connect."""
    c = Client()
    await c.connect(servers, **kwargs)  # type: ignore[arg-type]
    return c
