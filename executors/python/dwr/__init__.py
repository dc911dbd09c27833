"""dwr: the Python executor SDK and client of dwr, the durable work runtime.

    nc = await dwr.connect("nats://127.0.0.1:4222", "pay-1.creds")
    worker = dwr.Worker(nc, lease=30, concurrency=8)

    @worker.task("payments")
    async def pay(job: dwr.Job):
        ...

    await worker.run()

The package carries its own minimal asyncio NATS client (dwr._nats), with
nats-py's surface, as nats-py could not be installed where it was written: it
speaks TLS and reconnects when the connection is lost.
"""

from ._canonical import action_digest, canonical_json
from .client import Client
from .credentials import Credentials, connect, read_credentials, tls_context
from .errors import AttemptEnded, DwrError, Permanent
from .worker import (CAUSE_CANCELLED, CAUSE_LEASE_LOST, CAUSE_STOPPING, CAUSE_TIMEOUT, FAIL, INCONCLUSIVE, PASS,
                     ApprovalPending, Artifact, Check, Decision, Delegated, DelegationFailed,
                     DelegationPending, Job, ModelStep, Result, Signal, Verdict, Wait, Worker)

__all__ = [
    "connect", "read_credentials", "tls_context", "Credentials", "Client", "Worker", "Job", "Check", "Verdict", "Result", "Artifact",
    "ModelStep", "Decision", "Signal", "Wait", "ApprovalPending", "Delegated", "DelegationPending", "DelegationFailed", "DwrError", "Permanent", "AttemptEnded", "PASS", "FAIL",
    "INCONCLUSIVE", "CAUSE_CANCELLED", "CAUSE_LEASE_LOST", "CAUSE_TIMEOUT", "CAUSE_STOPPING", "action_digest",
    "canonical_json",
]

__version__ = "0.1.0"
