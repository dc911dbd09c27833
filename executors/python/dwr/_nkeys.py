"""NATS nkeys: decoding a user's seed and signing with it (Ed25519).

A seed is base32 (no padding) of [two prefix bytes, the 32-byte Ed25519
seed, CRC-16/XMODEM of what precedes it, little-endian]; a public key is
base32 of [one prefix byte, the 32-byte public key, its CRC-16]. See
github.com/nats-io/nkeys, strkey.go.
"""

from __future__ import annotations

import base64
import re

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = ["KeyPair", "crc16", "PREFIX_SEED", "PREFIX_USER", "find_user_seed", "NkeyError"]

PREFIX_SEED = 18 << 3  # 'S'
PREFIX_USER = 20 << 3  # 'U'
PREFIX_ACCOUNT = 0  # 'A'
PREFIX_SERVER = 13 << 3  # 'N'
PREFIX_OPERATOR = 14 << 3  # 'O'
PREFIX_CLUSTER = 2 << 3  # 'C'

_SEED_RE = re.compile(r"(?<![A-Z2-7])SU[A-Z2-7]{56}(?![A-Z2-7])")


class NkeyError(ValueError):
    """A seed or key that does not decode."""


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM (polynomial 0x1021, initial 0), as nkeys computes it."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def _b32decode(s: str) -> bytes:
    try:
        return base64.b32decode(s + "=" * (-len(s) % 8))
    except (ValueError, TypeError) as e:
        raise NkeyError("not base32: %s" % e) from None


def _b32encode(b: bytes) -> str:
    return base64.b32encode(b).decode().rstrip("=")


def _decode(s: str) -> bytes:
    raw = _b32decode(s)
    if len(raw) < 4:
        raise NkeyError("too short to be an nkey")
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    if crc16(body) != crc:
        raise NkeyError("its checksum does not match")
    return body


def encode_public(prefix: int, pub: bytes) -> str:
    """The string form of a public key of type prefix (PREFIX_USER, ...)."""
    body = bytes([prefix]) + pub
    return _b32encode(body + crc16(body).to_bytes(2, "little"))


def encode_seed(prefix: int, seed: bytes) -> str:
    """The string form of a 32-byte seed for keys of type prefix."""
    body = bytes([PREFIX_SEED | (prefix >> 5), (prefix & 31) << 3]) + seed
    return _b32encode(body + crc16(body).to_bytes(2, "little"))


def find_user_seed(text: str) -> str:
    """The user nkey seed ("SU...") a credential file holds — a bare seed
    line, or one between '-----' decoration lines. It raises NkeyError when
    there is none."""
    m = _SEED_RE.search(text)
    if m is None:
        raise NkeyError("no user nkey seed (a line starting with SU) in the credential")
    return m.group(0)


class KeyPair:
    """A user's Ed25519 key pair, from its seed."""

    def __init__(self, seed: bytes, prefix: int) -> None:
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        pub = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.prefix = prefix
        self.public_key = encode_public(prefix, pub)

    @classmethod
    def from_seed(cls, seed: str) -> "KeyPair":
        """Decodes an nkey seed ("S" and the key type's letter, then base32).
        It raises NkeyError when the seed does not decode, its checksum does
        not match, or it is not a seed."""
        body = _decode(seed.strip())
        if len(body) != 34:
            raise NkeyError("a seed holds 32 bytes of key; this one %d" % (len(body) - 2))
        b1, b2 = body[0], body[1]
        if b1 & 0xF8 != PREFIX_SEED:
            raise NkeyError("not a seed (it does not start with S)")
        prefix = ((b1 & 7) << 5) | ((b2 & 0xF8) >> 3)
        if prefix not in (PREFIX_USER, PREFIX_ACCOUNT, PREFIX_SERVER, PREFIX_OPERATOR, PREFIX_CLUSTER):
            raise NkeyError("a seed of an unknown key type")
        return cls(body[2:], prefix)

    def sign(self, data: bytes) -> bytes:
        """The Ed25519 signature of data."""
        return self._key.sign(data)
