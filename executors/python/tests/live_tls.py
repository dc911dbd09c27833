"""dwr.Client over TLS against a running dwr serve started with --tls-cert and
--tls-key: run by go test -run TestPythonClientOverTLS ./integration/
(DWR_SERVER, DWR_CREDS, and DWR_TLS_CA the CA that signed the server's
certificate). Not a unittest module: it needs the service."""

from __future__ import annotations

import asyncio
import os

import dwr


async def main() -> None:
    async with await dwr.Client.connect(os.environ["DWR_SERVER"], os.environ["DWR_CREDS"]) as c:
        assert c.nc._writer.get_extra_info("sslcontext") is not None, "the connection is TLS"
        t = await c.create_task("pytls", title="over tls")
        got = await c.task(t["id"])
        assert got["state"] == "ready", got
    print("live tls: ok")


asyncio.run(main())
