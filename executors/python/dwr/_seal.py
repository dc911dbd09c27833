"""Opening sealed values with a queue key, as the Go SDK does
(schemas/seal/seal.go, executors/queue_keys.go).

With encryption on, the service seals an execute work item's payloads (its
task's input, results, checkpoint, its dependencies' results) with its
queue's key of the day, ``"dwr:sealed:1:q.<epoch>:<base64url>"``; the
queue.key query hands that key to the queue's executors. A sealed value's
body is base64url (no padding) of ``nonce(24) || ciphertext || tag(16)``:
XChaCha20-Poly1305 under ``HKDF-SHA256(raw, info="dwr seal 1 encrypt")``,
with associated data ``"dwr\\0" + workspace + "\\0" + scope``. Its
plaintext is the JSON value that replaces the whole quoted string.

``cryptography`` has the IETF ChaCha20-Poly1305 (12-byte nonce) but no
XChaCha20: HChaCha20 (draft-irtf-cfrg-xchacha, section 2.2) derives the
subkey from the key and the nonce's first 16 bytes — one block function
per value, in pure Python (hchacha20_reference) or, much faster, taken from
cryptography's ChaCha20 keystream (checked against the draft's vector and
the reference at import).
"""

from __future__ import annotations

import base64
import re
import struct
from typing import Callable, List, Optional, Tuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SEALED_PREFIX = "dwr:sealed:1:"
DATA_KEY_BYTES = 32
NONCE_BYTES = 24
TAG_BYTES = 16

_OPEN = b'"' + SEALED_PREFIX.encode()
_QUEUE_SCOPE = re.compile(r"q\.(0|[1-9][0-9]*)\Z")
_MASK = 0xFFFFFFFF
_SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"


class SealError(ValueError):
    """A sealed value that is malformed, or does not open with its key."""


def hchacha20_reference(key: bytes, nonce16: bytes) -> bytes:
    """HChaCha20 in pure Python: the ChaCha20 block function's 20 rounds over
    the key and the 16-byte nonce, without the final addition; the first and
    last rows are the 32-byte subkey."""
    if len(key) != 32 or len(nonce16) != 16:
        raise ValueError("hchacha20: a 32-byte key and a 16-byte nonce")
    x = list(_SIGMA) + list(struct.unpack("<8I", key)) + list(struct.unpack("<4I", nonce16))

    def qr(a: int, b: int, c: int, d: int) -> None:
        xa, xb, xc, xd = x[a], x[b], x[c], x[d]
        xa = (xa + xb) & _MASK
        xd ^= xa
        xd = ((xd << 16) | (xd >> 16)) & _MASK
        xc = (xc + xd) & _MASK
        xb ^= xc
        xb = ((xb << 12) | (xb >> 20)) & _MASK
        xa = (xa + xb) & _MASK
        xd ^= xa
        xd = ((xd << 8) | (xd >> 24)) & _MASK
        xc = (xc + xd) & _MASK
        xb ^= xc
        xb = ((xb << 7) | (xb >> 25)) & _MASK
        x[a], x[b], x[c], x[d] = xa, xb, xc, xd

    for _ in range(10):
        qr(0, 4, 8, 12)
        qr(1, 5, 9, 13)
        qr(2, 6, 10, 14)
        qr(3, 7, 11, 15)
        qr(0, 5, 10, 15)
        qr(1, 6, 11, 12)
        qr(2, 7, 8, 13)
        qr(3, 4, 9, 14)
    return struct.pack("<8I", *(x[0:4] + x[12:16]))


def _hchacha20_keystream(key: bytes, nonce16: bytes) -> bytes:
    """HChaCha20 from cryptography's ChaCha20, whose 16-byte nonce (block
    counter and nonce) fills the last row of the state exactly as
    HChaCha20's nonce does: the first keystream block is the rounds' output
    plus the state, so subtracting the constants and the nonce from its
    first and last rows leaves HChaCha20's. Some 20 times faster than the
    pure Python rounds, which are a few hundred microseconds a value."""
    if len(key) != 32 or len(nonce16) != 16:
        raise ValueError("hchacha20: a 32-byte key and a 16-byte nonce")
    w = struct.unpack("<16I", Cipher(algorithms.ChaCha20(key, nonce16), mode=None).encryptor().update(bytes(64)))
    n = struct.unpack("<4I", nonce16)
    return struct.pack("<8I", *([(w[i] - _SIGMA[i]) & _MASK for i in range(4)] +
                                [(w[12 + i] - n[i]) & _MASK for i in range(4)]))


def _pick_hchacha20() -> Callable[[bytes, bytes], bytes]:
    """The keystream HChaCha20 when it gives the draft's test vector
    (draft-irtf-cfrg-xchacha-03, 2.2.1) and the reference's, else the
    reference."""
    key, nonce = bytes(range(32)), bytes.fromhex("000000090000004a0000000031415927")
    try:
        if _hchacha20_keystream(key, nonce) == hchacha20_reference(key, nonce) == bytes.fromhex(
                "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc"):
            return _hchacha20_keystream
    except Exception:  # noqa: BLE001 - a backend without ChaCha20: the reference
        pass
    return hchacha20_reference


# hchacha20(key, nonce16) is HChaCha20's 32-byte subkey.
hchacha20 = _pick_hchacha20()


def _aad(workspace: str, scope: str) -> bytes:
    return ("dwr\x00" + workspace + "\x00" + scope).encode()


class DataKey:
    """The opening half of a data key (seal.DataKey): what it sealed in a
    scope of a workspace opens with it there, and nowhere else."""

    def __init__(self, raw: bytes) -> None:
        if len(raw) != DATA_KEY_BYTES:
            raise ValueError("a data key has %d bytes, not %d" % (len(raw), DATA_KEY_BYTES))
        self._enc = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"dwr seal 1 encrypt").derive(raw)

    def open_bytes(self, workspace: str, scope: str, sealed: bytes) -> bytes:
        """The plaintext of sealed (nonce, ciphertext and tag); SealError
        when it does not open in scope of workspace."""
        if len(sealed) < NONCE_BYTES + TAG_BYTES:
            raise SealError("a sealed value is malformed")
        nonce = sealed[:NONCE_BYTES]
        aead = ChaCha20Poly1305(hchacha20(self._enc, nonce[:16]))
        try:
            return aead.decrypt(b"\x00\x00\x00\x00" + nonce[16:], sealed[NONCE_BYTES:], _aad(workspace, scope))
        except InvalidTag:
            raise SealError("a sealed value of scope %s does not open" % scope) from None

    def open(self, workspace: str, scope: str, b64: bytes) -> bytes:
        """The plaintext of a sealed value's body (its base64url)."""
        if not re.fullmatch(rb"[A-Za-z0-9_-]*", b64) or len(b64) % 4 == 1:
            raise SealError("a sealed value is malformed")
        try:
            sealed = base64.urlsafe_b64decode(b64 + b"=" * (-len(b64) % 4))
        except ValueError:
            raise SealError("a sealed value is malformed") from None
        return self.open_bytes(workspace, scope, sealed)


def parse_queue_scope(scope: str) -> Optional[int]:
    """The epoch (days since 1970-01-01 UTC) a queue key's scope
    ``q.<epoch>`` names, or None when scope is not one."""
    m = _QUEUE_SCOPE.match(scope)
    return int(m.group(1)) if m else None


def _values(b: bytes) -> List[Tuple[int, int, str, bytes]]:
    """The sealed values in b, a JSON document: (start, end, scope, body),
    start at the opening quote, end past the closing one. A sealed prefix
    after an escaped quote is text in a string. A malformed value is an
    error."""
    out = []
    i = b.find(_OPEN)
    while i >= 0:
        if i > 0 and b[i - 1] == 0x5C:  # a backslash: inside a string
            i = b.find(_OPEN, i + 1)
            continue
        start = i + len(_OPEN)
        end = b.find(b'"', start)
        colon = b.find(b":", start)
        if end < 0 or colon < 0 or colon > end:
            raise SealError("a sealed value is malformed")
        out.append((i, end + 1, b[start:colon].decode("utf-8", "replace"), b[colon + 1:end]))
        i = b.find(_OPEN, end + 1)
    return out


def scopes(b: bytes) -> List[str]:
    """The scopes of the sealed values in b, each once, in the order they
    first appear ("" for a malformed value: no key opens it)."""
    try:
        vals = _values(b)
    except SealError:
        return [""]
    out: List[str] = []
    for _, _, s, _ in vals:
        if s not in out:
            out.append(s)
    return out


def open_all(b: bytes, workspace: str, key: Callable[[str], DataKey]) -> bytes:
    """b, a JSON document of workspace, with every sealed value replaced by
    its plaintext opened with key(scope); b itself when it holds none. A
    value that does not open is a SealError: nothing is read from a payload
    that may have been tampered with."""
    vals = _values(b)
    if not vals:
        return b
    parts = []
    at = 0
    for start, end, scope, body in vals:
        parts.append(b[at:start])
        parts.append(key(scope).open(workspace, scope, body))
        at = end
    parts.append(b[at:])
    return b"".join(parts)
