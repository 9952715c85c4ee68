"""How talking to a DUT fails: DeviceError and its subclasses, one per thing a caller acts on.

Every one is a LabError of kind "device" with a `problem` and a `remedy`. Callers branch on the
class (HostKeyMismatch and AuthRefused are never worth a retry; ConnectionLost may have run the
command), never on the message text.
"""

from __future__ import annotations

from labwarden.core.errors import LabError


class DeviceError(LabError):
    """A DUT failure: what went wrong (`problem`) and what to do about it (`remedy`)."""

    kind = "device"


class Unreachable(DeviceError):
    """Connecting was refused or timed out on every try."""


class HostKeyMismatch(DeviceError):
    """The DUT presented a key other than the pinned one; never retried."""


class AuthRefused(DeviceError):
    """The DUT refused the client key (or the key could not be loaded); never retried."""


class CommandTimeout(DeviceError):
    """A command outlived its timeout; its channel was closed (the DUT hung it up)."""


class ConnectionLost(DeviceError):
    """The connection or channel broke while a request was in flight; it may or may not have run."""


class CommandFailed(DeviceError):
    """A command exited non-zero where success was required (`check=True`, `signal`)."""


class RemoteFileError(DeviceError):
    """A file operation on the DUT failed (missing, too large, permission, checksum)."""
