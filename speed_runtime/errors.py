"""One error hierarchy for the runtime.

Local misuse (bad key file, bad directory, bad name) derives from ConfigError; problems with a
peer or the environment derive from SpeedError directly. Every message is one sentence a user
can act on, and no error ever carries key material or plaintext.
"""
from __future__ import annotations


class SpeedError(Exception):
    """Base of every error the runtime raises on purpose."""


class ConfigError(SpeedError):
    """The caller's configuration is wrong (key file, directory, name, argument)."""


class KeyFileError(ConfigError):
    """A key file is missing, malformed or has unsafe permissions."""


class DirectoryError(ConfigError):
    """The communication directory is unsafe or unusable."""


class InvalidNameError(ConfigError):
    """A node name breaks the naming rule of the wire contract."""


class NameInUseError(SpeedError):
    """Another live node holds the name."""

    def __init__(self, name: str, pid: object, host: object):
        super().__init__(
            f"node name {name!r} is in use by a live node (pid {pid} on host {host}); "
            "choose another name or stop that node"
        )
        self.name, self.pid, self.host = name, pid, host


class NodeUnavailableError(SpeedError):
    """The target node has no live registry entry."""

    def __init__(self, name: str, detail: str = "it has no live registry entry"):
        super().__init__(f"node {name} is not available: {detail}")
        self.name = name


class DeliveryError(SpeedError):
    """Writing an envelope into a target's inbox failed; nothing was delivered."""


class LeaseLostError(SpeedError):
    """This node's registry entry was taken over; it no longer owns its name."""


class NodeClosedError(SpeedError):
    """The node is not running."""


class EnvelopeError(SpeedError):
    """An envelope or inbox file was rejected; `reason` is a trace reason of contract §8."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"envelope rejected ({reason}){': ' + detail if detail else ''}")
        self.reason = reason
        self.detail = detail


SPC_ERROR_CODES = (
    "SERVICE_NOT_FOUND",
    "ACCESS_DENIED",
    "INVALID_ARGUMENTS",
    "EXECUTION_FAILED",
    "TIMEOUT",
    "INTERNAL_ERROR",
)


class SpcError(SpeedError):
    """A Speed Procedure Call ended in an error; `code` is one of SPC_ERROR_CODES."""

    def __init__(self, code: str, message: str, *, request_id: str | None = None):
        if code not in SPC_ERROR_CODES:
            message = f"{message} (unknown error code {code!r})"
            code = "INTERNAL_ERROR"
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.request_id = request_id


class AccessDeniedError(SpcError):
    """A grant is missing; raised before anything is written (code ACCESS_DENIED)."""

    def __init__(self, message: str, *, request_id: str | None = None):
        super().__init__("ACCESS_DENIED", message, request_id=request_id)
