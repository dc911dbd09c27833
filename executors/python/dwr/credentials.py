"""dwr credential files: connecting with one."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from . import _nats
from ._nkeys import KeyPair, NkeyError, find_user_seed

__all__ = ["Credentials", "read_credentials", "connect", "inbox_prefix"]

# A credential file is a few lines; anything larger is not one.
MAX_CREDENTIAL_BYTES = 64 * 1024


def inbox_prefix(public_key: str) -> str:
    """The inbox prefix an identity may subscribe to (schemas.InboxPrefix)."""
    return "_INBOX." + public_key


@dataclass(frozen=True)
class Credentials:
    """A credential: its user nkey seed and its public key (the identity)."""

    seed: str
    public_key: str

    @property
    def inbox_prefix(self) -> str:
        return inbox_prefix(self.public_key)

    def __repr__(self) -> str:  # the seed is a secret
        return "Credentials(public_key=%r)" % self.public_key


def read_credentials(path: str) -> Credentials:
    """Reads a dwr credential file (what `dwr users add --out FILE` writes,
    or the admin.creds `dwr serve` creates): the user nkey seed it holds.
    It raises ValueError naming the file when it holds no valid seed."""
    with open(path, "rb") as f:
        data = f.read(MAX_CREDENTIAL_BYTES + 1)
    if len(data) > MAX_CREDENTIAL_BYTES:
        raise ValueError("credential %s: larger than %d bytes: not a credential file" % (path, MAX_CREDENTIAL_BYTES))
    try:
        seed = find_user_seed(data.decode("utf-8", "replace"))
        kp = KeyPair.from_seed(seed)
    except NkeyError as e:
        raise ValueError("credential %s: %s" % (path, e)) from None
    return Credentials(seed=seed, public_key=kp.public_key)


async def connect(url: Optional[str] = None, creds: Optional[str] = None, *, name: str = "dwr-python") -> _nats.Client:
    """Connects to dwr's NATS server at url (default $DWR_SERVER, else
    nats://127.0.0.1:4222) with the credential file creds (default
    $DWR_CREDS; none: an open server's anonymous user): its nkey, and the
    inbox prefix the server lets that identity subscribe to."""
    url = url or os.environ.get("DWR_SERVER") or "nats://127.0.0.1:4222"
    creds = creds or os.environ.get("DWR_CREDS") or None
    nc = _nats.Client()
    if creds:
        c = read_credentials(creds)
        await nc.connect(url, nkey_seed=c.seed, inbox_prefix=c.inbox_prefix, name=name)
    else:
        await nc.connect(url, name=name)
    return nc
