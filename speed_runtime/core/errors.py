"""One error hierarchy for the runtime, split as h11 splits its protocol errors:

- **local** (`ConfigError` and below): the caller's own configuration or use is wrong (a bad key
  file, directory, name or argument). Fix it where you called from.
- **remote / environment** (everything else): a peer, another process or the file system did
  not do what the contract promises (a node is unavailable, a grant is missing, a peer answered
  with an error, an envelope failed its checks, the registry lock is held by a stopped process).

Every message is one sentence a user can act on, and no error carries key material or plaintext.
"""
from __future__ import annotations


class SpeedError(Exception):
    """Base of every error the runtime raises on purpose. `unanswered`: the failure is that no
    answer came at all (a call or a confirmed message past its deadline), not that one said no."""

    unanswered = False


# ----------------------------------------------------------------------------- local
class ConfigError(SpeedError):
    """The caller's configuration is wrong (key file, directory, name, argument)."""


class KeyFileError(ConfigError):
    """A key file is missing, malformed or has unsafe permissions."""


class DirectoryError(ConfigError):
    """The communication directory (or a file the runtime needs in it) is unsafe or unusable."""


class InvalidNameError(ConfigError):
    """A node name breaks the naming rule of the wire contract."""


class EntryTooLargeError(ConfigError):
    """The node's registry entry would exceed what every reader accepts (MAX_ENTRY_BYTES): the
    change that would make it so is refused, and the entry in force stays."""


class PayloadTooLargeError(ConfigError):
    """A payload exceeds what this node may send; nothing was written."""


class NodeClosedError(SpeedError):
    """The node is not running (not started yet, or closed)."""


# ----------------------------------------------------------------------------- remote / environment
class NameInUseError(SpeedError):
    """Another live node holds the name."""

    def __init__(self, name: str, pid: object, host: object):
        super().__init__(
            f"node name {name!r} is in use by a live node (pid {pid} on host {host}); "
            "choose another name or stop that node"
        )
        self.name, self.pid, self.host = name, pid, host


class NodeUnavailableError(SpeedError):
    """The target node has no live registry entry (missing, stale, leaving, or its process exited)."""

    def __init__(self, name: str, detail: str = "it has no live registry entry"):
        super().__init__(f"node {name} is not available: {detail}")
        self.name = name
        self.detail = detail


class CalleeGoneError(NodeUnavailableError):
    """The instance a call (or a control request) waited on stopped or restarted before it answered:
    no answer can come. The request may have run. Raised before the call's own timeout."""

    def __init__(self, name: str, detail: str, what: str):
        SpeedError.__init__(self, f"node {name} stopped before it answered {what}: {detail}; the request may "
                                  "have run, and no answer will come")
        self.name = name
        self.detail = detail


class NodeLeavingError(NodeUnavailableError):
    """The target is shutting down gracefully (status `leaving`): it takes no new deliveries."""

    def __init__(self, name: str, detail: str = "it takes no new deliveries"):
        SpeedError.__init__(self, f"node {name} is leaving; {detail}")
        self.name = name
        self.detail = detail


class AccessDeniedError(SpeedError):
    """A grant is missing; raised before anything is written. `missing` names the grant:
    (node that must grant, node to be granted)."""

    code = "ACCESS_DENIED"

    def __init__(self, message: str, *, missing: tuple[str, str] | None = None):
        super().__init__(message)
        self.message = message
        self.missing = missing


class DeliveryError(SpeedError):
    """Writing an envelope into a target's inbox failed; nothing was delivered."""


class DeliveryTimeoutError(DeliveryError):
    """A confirmed message was not acknowledged in time (it may still be handled later)."""

    unanswered = True


class LeaseLostError(SpeedError):
    """This node's registry entry was taken over; it no longer owns its name."""


class RegistryLockError(SpeedError):
    """The registry lock could not be taken within the bounded wait (contract §4.2)."""

    def __init__(self, message: str, *, holder_pid: int | None = None):
        super().__init__(message)
        self.holder_pid = holder_pid


class BadEntryError(SpeedError):
    """A registry entry cannot be parsed; readers treat it as stale and report it."""


class EntryUnreadableError(BadEntryError):
    """The system refused to open a registry entry (`errno`: EACCES, EMFILE, EIO…): nothing is
    known of its content. Readers report it as a bad entry; nothing that owns, takes or removes an
    entry acts on it (a renewal fails and is retried, a reap leaves the entry alone)."""

    def __init__(self, message: str, errno: int | None):
        super().__init__(message)
        self.errno = errno


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
    """A Speed Procedure Call ended in an error; `code` is one of SPC_ERROR_CODES. Raised when the
    callee answered with an error, or the call timed out waiting for it (`unanswered`: no answer
    came at all, as opposed to a callee that answered TIMEOUT itself)."""

    def __init__(self, code: str, message: str, *, request_id: str | None = None, unanswered: bool = False):
        if code not in SPC_ERROR_CODES:
            message = f"{message} (unknown error code {code!r})"
            code = "INTERNAL_ERROR"
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.request_id = request_id
        self.unanswered = unanswered


# ----------------------------------------------------------------------------- the control extension
class OperatorNotTrustedError(SpeedError):
    """The target accepts no control request from this operator: it does not speak `control`, or
    its entry does not list this operator's fingerprint. Nothing was written."""

    def __init__(self, target: str, fingerprint: str, public_key: str, detail: str):
        super().__init__(f"node {target} does not trust operator {fingerprint}: {detail}; start it with "
                         f"`speed node ... --operator {public_key}` to let this operator administer it")
        self.target, self.fingerprint, self.public_key = target, fingerprint, public_key


class ControlRefusedError(SpeedError):
    """The target answered a control request with a refusal; `reason` is the journal reason
    (docs/PROTOCOL.md, `control`), `detail` its sentence."""

    def __init__(self, target: str, reason: str, detail: str):
        super().__init__(f"node {target} refused the request ({reason}): {detail}")
        self.target, self.reason, self.detail = target, reason, detail


class ControlTimeoutError(SpeedError):
    """No answer to a control request in time. `withdrawn` is True when the request was taken
    back before the target took it (it was not applied), False when the target took it."""

    def __init__(self, message: str, *, withdrawn: bool):
        super().__init__(message)
        self.withdrawn = withdrawn
