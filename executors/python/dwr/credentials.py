"""dwr credential files: connecting with one."""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from . import _nats
from ._nkeys import KeyPair, NkeyError, find_user_seed

__all__ = ["Credentials", "read_credentials", "connect", "inbox_prefix", "tls_context"]

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
    data = _read_bounded(path, MAX_CREDENTIAL_BYTES, "credential %s: larger than %d bytes: not a credential file")
    try:
        seed = find_user_seed(data.decode("utf-8", "replace"))
        kp = KeyPair.from_seed(seed)
    except NkeyError as e:
        raise ValueError("credential %s: %s" % (path, e)) from None
    return Credentials(seed=seed, public_key=kp.public_key)


MAX_KEY_FILE = 64 << 10


def read_signing_key(path: str) -> Tuple[Ed25519PrivateKey, str]:
    """Reads an approver's key file (``dwr keys create``): its Ed25519
    private key and the approver its "# approver:" line names ("" when
    none). It raises ValueError saying what the file holds instead."""
    text = _read_bounded(path, MAX_KEY_FILE, "dwr: key file %s is larger than %d bytes: not a key file").decode("utf-8", "replace")
    named = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("-----BEGIN"):
            break
        if line.startswith("# approver:"):
            named = line[len("# approver:"):].strip()
    m = re.search(r"-----BEGIN PRIVATE KEY-----.*?-----END PRIVATE KEY-----", text, re.S)
    if not m:
        raise ValueError("dwr: key file %s holds no PEM \"PRIVATE KEY\" block: make one with "
                         "`dwr keys create NAME --role ROLE --out FILE`" % path)
    try:
        key = load_pem_private_key(m.group(0).encode(), password=None)
    except (ValueError, TypeError) as e:
        raise ValueError("dwr: key file %s: the PRIVATE KEY block does not parse (PKCS #8): %s" % (path, e)) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("dwr: key file %s holds a %s, not an Ed25519 key" % (path, type(key).__name__))
    return key, named


def _read_bounded(path: str, limit: int, too_large: str) -> bytes:
    """The bytes of file path, at most limit; a larger file raises
    ValueError(too_large % (path, limit))."""
    with open(path, "rb") as f:
        b = f.read(limit + 1)
    if len(b) > limit:
        raise ValueError(too_large % (path, limit))
    return b


def tls_context(ca: Optional[str] = None, cert: Optional[str] = None, key: Optional[str] = None) -> Optional[ssl.SSLContext]:
    """The TLS context to connect with, as the dwr CLI's --tls-ca, --tls-cert
    and --tls-key make it (defaults $DWR_TLS_CA, $DWR_TLS_CERT,
    $DWR_TLS_KEY): the server's certificate verified against the CA file
    (else the system's CAs), and the client's certificate for mutual TLS.
    None when none of them is set. It raises ValueError naming what is
    missing or cannot be read."""
    ca = ca or os.environ.get("DWR_TLS_CA") or None
    cert = cert or os.environ.get("DWR_TLS_CERT") or None
    key = key or os.environ.get("DWR_TLS_KEY") or None
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise ValueError("dwr: mutual TLS needs both a certificate and its key (DWR_TLS_CERT and DWR_TLS_KEY)")
    try:
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise ValueError("dwr: TLS files (ca %s, cert %s, key %s): %s" % (ca, cert, key, e)) from None
    return ctx


async def connect(url: Optional[str] = None, creds: Optional[str] = None, *, name: str = "dwr-python",
                  tls: Optional[ssl.SSLContext] = None, **options: Any) -> _nats.Client:
    """Connects to dwr's NATS server at url (default $DWR_SERVER, else
    nats://127.0.0.1:4222) with the credential file creds (default
    $DWR_CREDS; none: an open server's anonymous user): its nkey, and the
    inbox prefix the server lets that identity subscribe to. TLS is used
    with tls, else with the context tls_context() makes from the
    environment, else when the URL is tls:// or the server requires it.
    options go to dwr._nats.Client.connect (allow_reconnect,
    max_reconnect_attempts, reconnect_time_wait, ping_interval,
    connect_timeout): the connection is made again when it is lost."""
    url = url or os.environ.get("DWR_SERVER") or "nats://127.0.0.1:4222"
    creds = creds or os.environ.get("DWR_CREDS") or None
    if tls is None:
        tls = tls_context()
    nc = _nats.Client()
    if creds:
        c = read_credentials(creds)
        await nc.connect(url, nkey_seed=c.seed, inbox_prefix=c.inbox_prefix, name=name, tls=tls, **options)
    else:
        await nc.connect(url, name=name, tls=tls, **options)
    return nc
