"""The errors of the dwr SDK."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

__all__ = [
    "DwrError",
    "Permanent",
    "AttemptEnded",
    "INVALID",
    "NOT_FOUND",
    "CONFLICT",
    "FORBIDDEN",
    "TOO_LARGE",
    "UNAVAILABLE",
    "INTERNAL",
    "CAUSE_CANCELLED",
    "CAUSE_LEASE_LOST",
    "CAUSE_TIMEOUT",
    "CAUSE_STOPPING",
]

# The codes of the service's refusals (schemas.Code*).
INVALID = "invalid"
NOT_FOUND = "not_found"
CONFLICT = "conflict"
FORBIDDEN = "forbidden"
TOO_LARGE = "too_large"
UNAVAILABLE = "unavailable"
INTERNAL = "internal"

# Why a job's attempt ended before its handler returned (Job.cancel_cause,
# AttemptEnded.cause).
CAUSE_CANCELLED = "cancelled"
CAUSE_LEASE_LOST = "lease_lost"
CAUSE_TIMEOUT = "timeout"
CAUSE_STOPPING = "stopping"


class DwrError(Exception):
    """A request the service refused — ``{"ok": false, "error": {...}}`` — or
    one that got no dwr reply (code ``unavailable``; ``forbidden`` when the
    NATS server refused the subject to this credential).

    ``code`` is one of the codes above, ``message`` says why, ``fields`` are
    the fields at fault (``{"pointer": "/tasks/1/key", "message": ...}``),
    ``field`` the first one's pointer (None when there is none), and
    ``retry_after`` (an RFC 3339 time, or None) when the request was refused
    only for being early."""

    def __init__(self, code: str, message: str, fields: Optional[List[Dict[str, str]]] = None,
                 retry_after: Optional[str] = None) -> None:
        self.code = code
        self.message = message
        self.fields: List[Dict[str, str]] = list(fields or [])
        self.retry_after = retry_after
        super().__init__("%s: %s" % (code, message))

    @property
    def field(self) -> Optional[str]:
        return self.fields[0].get("pointer") if self.fields else None

    @classmethod
    def from_reply(cls, err: Any) -> "DwrError":
        if not isinstance(err, dict):
            return cls(INTERNAL, "the service refused the request without saying why")
        fields = [f for f in err.get("fields") or [] if isinstance(f, dict)]
        return cls(str(err.get("code") or INTERNAL), str(err.get("message") or ""), fields,
                   err.get("retry_after") if isinstance(err.get("retry_after"), str) else None)


class Permanent(Exception):
    """Raise it from a handler for a failure that must not be retried: the
    task fails after this attempt. ``code`` is the failure's code."""

    def __init__(self, message: str, code: str = "") -> None:
        self.message = message
        self.code = code
        super().__init__(message)


class AttemptEnded(Exception):
    """The job's attempt no longer holds its task: ``cause`` is "cancelled"
    (the task ended), "lease_lost" (another attempt took it over),
    "timeout" (the attempt's deadline passed) or "stopping" (the worker
    stopped before the job finished). A checkpoint or an approval request
    of such an attempt raises it; the handler's task is cancelled too."""

    def __init__(self, cause: str, message: str = "") -> None:
        self.cause = cause
        super().__init__(message or "the attempt ended: " + cause)
