"""Canonical JSON and action digests, byte for byte as the service makes
them (schemas.CanonicalJSON): object keys sorted, no insignificant space,
numbers as written, no HTML escaping, Go's string escapes."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "action_digest", "ACTION_DIGEST_PREFIX"]

ACTION_DIGEST_PREFIX = "sha256:"


class _Number(str):
    """A JSON number kept as it was written."""


# The characters Go writes with a two-character escape.
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _escape(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        short = _SHORT_ESCAPES.get(ch)
        if short is not None:
            out.append(short)
        elif o < 0x20 or o in (0x2028, 0x2029):
            out.append("\\u%04x" % o)
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\ufffd")  # a lone surrogate: Go writes the replacement character
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _encode(v: Any, out: list) -> None:
    if isinstance(v, _Number):
        out.append(str.__str__(v))
    elif v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, str):
        out.append(_escape(v))
    elif isinstance(v, dict):
        out.append("{")
        # Go sorts map keys by their UTF-8 bytes.
        for i, k in enumerate(sorted(v, key=lambda k: k.encode("utf-8", "surrogatepass"))):
            if i:
                out.append(",")
            out.append(_escape(k))
            out.append(":")
            _encode(v[k], out)
        out.append("}")
    elif isinstance(v, list):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            _encode(x, out)
        out.append("]")
    else:
        raise TypeError("not a JSON value: %r" % type(v))


def canonical_json(doc: bytes | str) -> bytes:
    """Re-encodes one JSON document canonically. It raises ValueError when
    doc is not exactly one JSON value."""
    if isinstance(doc, bytes):
        doc = doc.decode("utf-8")
    v = loads_as_written(doc)
    out: list = []
    _encode(v, out)
    return "".join(out).encode("utf-8")


def loads_as_written(doc: bytes | str) -> Any:
    """Decodes a JSON document keeping every number as it was written (a
    str subclass), so that a part of it digests as the service digests it:
    digest_as_written(value["action"])."""
    return json.loads(doc, parse_int=_Number, parse_float=_Number,
                      parse_constant=lambda c: (_ for _ in ()).throw(ValueError("%s is not JSON" % c)))


def digest_as_written(v: Any) -> str:
    """The action digest of a value loads_as_written decoded: its numbers'
    digits as written, not as Python writes them again (1e21, not 1e+21)."""
    out: list = []
    _encode(v, out)
    return ACTION_DIGEST_PREFIX + hashlib.sha256("".join(out).encode("utf-8")).hexdigest()


def action_digest(action: Any) -> str:
    """The digest of an action, as the service computes it and an approver
    signs it: "sha256:" and the hex SHA-256 of its canonical JSON. action is
    a Python value (encoded to JSON first) or bytes holding JSON."""
    raw = action if isinstance(action, (bytes, bytearray)) else json.dumps(action, ensure_ascii=False).encode()
    return ACTION_DIGEST_PREFIX + hashlib.sha256(canonical_json(bytes(raw))).hexdigest()
