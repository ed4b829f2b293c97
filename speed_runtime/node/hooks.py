"""The extension hooks of a node (wire contract §9, docs/PROTOCOL.md "Extensions"): what an
extension may implement (`Extension`), a payload about to be delivered (`Outbound`), the
receiver's payload decoder over the enabled extensions' layouts, and loading extensions by name.
They live here, below both the node and the extensions (ext/), so that the node never imports an
extension: `load` imports each enabled one by its module's name.

Hooks (all optional; see Extension): `start` after the node registered, `stop` when it closes,
`entry_fields` merged into every registry entry it writes, `on_envelope` for an accepted envelope
before the node dispatches it (return True when the extension took it over); `watch`, `hint` and
`step` for an extension with a directory of its own, watched on the node's one inotify instance
and handled, in bounded steps, on the protocol thread; `decode` for a payload layout selected by
the extension's flag bit (called by the receiver's judgement, through `decoder`); `outbound` for a
payload the node is about to deliver (Node.deliver_payload: return the sequence number when the
extension delivered it in its own layout); on the receiving side `admit` before an allowed
sender's file is opened, `rejudge` for a rejected envelope before it is removed and `on_rejected`
after an envelope that authenticated as its sender was rejected (core/inbound.py calls them at
their steps); on the sending side `admit_send` before an envelope is sealed and `delivered` after
it landed in the target's inbox.
"""
from __future__ import annotations

import importlib
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple, Protocol

from ..core.entry import RegistryEntry
from ..core.errors import ConfigError
from ..core.receiving import Decoder, decode_v1

if TYPE_CHECKING:  # pragma: no cover
    from ..core.keys import Key
    from ..core.message import Message
    from ..core.receiving import Verdict
    from ..core.replay import ReplayGuard
    from ..monitor import RegistryMonitor
    from .config import NodeConfig
    from .telemetry import Telemetry

# name -> the module that defines `EXTENSION` (an Extension subclass), imported by name when a node
# enables it: `node` never imports `ext` (the layers run one way: ext builds on node).
# In the order their hooks run, whatever order a node names them in: durable first (it refuses a
# durable bit on a binary or chunk layout, and takes a MESSAGE or ACK with its bit, reliable's bit
# too, as the C node does), then chunks (a chunk is reassembled before reliable sees the whole
# message: reliable first took a chunked reliable message's chunks and lost it)
KNOWN = {"control": "speed_runtime.ext.control", "durable": "speed_runtime.ext.durable",
         "chunks": "speed_runtime.ext.chunks", "reliable": "speed_runtime.ext.reliable",
         "quota": "speed_runtime.ext.quota"}


def speaks(entry: RegistryEntry | None, feature: str) -> bool:
    """Whether `entry`'s node advertises `feature` (§9: use an extension only towards it)."""
    return entry is not None and feature in entry.features


class Outbound(NamedTuple):
    """A payload a node is about to deliver (Node.deliver_payload). `payload` holds its value
    unencoded (`data`, `arguments`, `result`: a JSON value, or raw bytes for a MESSAGE);
    `entry` is the target's entry when the caller has just judged it."""

    target: str
    etype: int
    payload: dict[str, Any]
    flags: int = 0
    entry: RegistryEntry | None = None
    trace_extra: dict[str, Any] | None = None
    before_deliver: Callable[[int], None] | None = None
    files: list[str] | None = None   # when given, gets the names of the envelope files delivered
    wait: float | None = None        # how long an extension may hold each envelope back (quota); None: never


class Extension:
    """Base of an extension's per-node part, constructed with the node's ExtensionHost
    (node/context.py): all it may ask of the node it serves."""

    name = ""

    def __init__(self, host: "ExtensionHost"):
        self.host = host

    def start(self) -> None:
        """After the node registered, before it receives."""

    def stop(self) -> None:
        """When the node closes, after its inbox was drained and before it deregisters."""

    def entry_fields(self) -> dict[str, Any]:
        """Registry fields this extension publishes (§9: new registry fields)."""
        return {}

    def on_envelope(self, verdict: "Verdict", sender: str, data: bytes, name: str) -> bool:
        """An accepted envelope, before the node dispatches it; True when this extension handles it."""
        return False

    def watch(self) -> tuple[str, int] | None:
        """A directory of this extension, created before the node registers, to watch on the node's
        one inotify instance: (path, inotify mask). Its events go to `hint`."""
        return None

    def hint(self, name: str) -> None:
        """On the protocol thread: inotify named `name` in this extension's directory ("" when the
        directory itself was moved or removed). Only a hint: `step` also lists the directory."""

    def step(self, listed: bool) -> bool:
        """On the protocol thread, whenever the node may receive: handle a bounded amount of this
        extension's files. `listed` says the node has just listed its inbox (list yours too).
        Returns True while work is left, so that the thread does not sleep."""
        return False

    def decode(self, plaintext: bytes, etype: int, flags: int) -> tuple[dict[str, Any], Any, int] | None:
        """(payload, anything else the layout carries, what the decoded payload costs in memory:
        payloads.decoded_cost) for a payload layout this extension's flag bit selects; None when
        the flags select none of its layouts."""
        return None

    def outbound(self, out: Outbound) -> int | None:
        """Deliver `out` in this extension's layout and return its (last) sequence number, or None
        to leave it to the next extension and finally to v1."""
        return None

    def admit(self, sender: str, name: str) -> str | None:
        """Before a file of an allowed sender is opened (§5.5 step 1, on its name alone): a journal
        reason to remove it unread, or None to judge it."""
        return None

    def on_rejected(self, sender: str, name: str, reason: str, detail: str) -> None:
        """An envelope that authenticated as `sender` (its tag passed and its header names the
        sender's registered instance) was rejected with `reason` (and recorded); never called for
        a file that authenticated as nobody. `detail` refines some reasons (`late` for an
        unexpected_response that answers nothing still pending)."""

    def admit_send(self, target: str, entry: RegistryEntry, etype: int, size: int, wait: float | None,
                   lock: threading.Lock) -> RegistryEntry:
        """Before an envelope of `size` bytes is sealed for `target` (the link's `lock` held, which
        may be released while waiting). `wait`: None for answers, which never wait; else the most
        seconds to wait (0: not at all). Returns the entry to seal for, or raises."""
        return entry

    def delivered(self, target: str, entry: RegistryEntry, filename: str, size: int) -> None:
        """An envelope file of `size` bytes landed in `target`'s inbox (the link's lock held)."""


    def rejudge(self, verdict: "Verdict", sender: str, data: bytes, arrived_ms: int) -> "Verdict":
        """A rejected envelope, before it is removed: the verdict to keep (this one, or an acceptance
        under the extension's own rules for what it defines, e.g. durable copies bound to a name)."""
        return verdict


def overriding(extensions: Iterable[Extension], hook: str) -> list[Callable]:
    """The bound `hook` of each extension that implements it (the base's does nothing), in order:
    the receiver's path calls only these."""
    base = getattr(Extension, hook)
    return [getattr(e, hook) for e in extensions if getattr(type(e), hook) is not base]


def decoder(extensions: dict[str, Extension]) -> Decoder:
    """The receiver's payload decoder: the enabled extensions' layouts first, then v1's."""
    layouts = [e for e in extensions.values() if type(e).decode is not Extension.decode]
    if not layouts:
        return decode_v1

    def decode(plaintext: bytes, etype: int, flags: int) -> tuple[dict[str, Any], Any, int]:
        for extension in layouts:
            decoded = extension.decode(plaintext, etype, flags)
            if decoded is not None:
                return decoded
        return decode_v1(plaintext, etype, flags)
    return decode


def load(features: tuple[str, ...], host: "ExtensionHost") -> dict[str, Extension]:
    """The extensions a node enables, by name, in KNOWN's order (that of their hooks), each given
    `host`."""
    for feature in features:
        if feature not in KNOWN:
            raise ConfigError(f"unknown feature {feature!r}; the extensions are: {', '.join(sorted(KNOWN))}")
    out: dict[str, Extension] = {}
    for feature, module in KNOWN.items():
        if feature not in features:
            continue
        try:
            cls = importlib.import_module(module).EXTENSION
        except (ImportError, AttributeError):
            raise ConfigError(f"the {feature!r} extension is not available in this runtime") from None
        out[feature] = cls(host)
    return out


class ExtensionHost(Protocol):
    """All an extension may ask of the node it serves (§9). An extension is constructed with this
    and nothing else; what it keeps of it (telemetry, the monitor) it asks for once, in its
    constructor."""

    name: str
    id: str
    id_bytes: bytes
    root: str
    key: Key
    config: NodeConfig
    telemetry: Telemetry
    monitor: RegistryMonitor

    # ---------------------------------------------------------------- sending
    def deliver_payload(self, out: "Outbound") -> int:
        """Deliver a payload: in the first extension's layout that takes it, else as v1."""

    def send(self, target: str, etype: int, body: bytes, **options: Any) -> int:
        """Seal `body` and deliver it as one envelope (node/sender.py: Sender.send)."""

    def reply(self, target: str, etype: int, payload: dict, trace_extra: dict | None = None,
              flags: int = 0) -> str | None:
        """An answer; never raises (a failure is counted). Why it cannot be sent at all, or None."""

    def live_entry(self, target: str) -> RegistryEntry:
        """The target's entry as its file holds it now, if it may receive (§5.4 step 1)."""

    def check_grant(self, target: str, entry: RegistryEntry) -> None:
        """Raise AccessDeniedError unless `entry` allows this node (§5.4 step 2)."""

    def allows(self, name: str) -> bool:
        """Whether this node allows `name` (its answers can come back)."""

    def expect_ack(self, target: str, seq: int, source_id: bytes, waiter: Future) -> None: ...

    def forget_ack(self, target: str, seq: int) -> None: ...

    def expects_response(self, sender: str, source_id: bytes, payload: dict) -> bool:
        """Whether an SPC response answers a pending call to that instance, in time."""

    def check_running(self) -> None: ...

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Run `callback` on the deadline thread at `when` (time.monotonic)."""

    # ---------------------------------------------------------------- receiving
    @property
    def replay(self) -> ReplayGuard:
        """The receiver's replay state."""

    def judge_as_delivered(self, sender: str, data: bytes, arrived: float,
                           judge: Callable[..., Verdict] | None = None) -> Verdict: ...

    def accepted(self, verdict: Verdict, sender: str, data: bytes, name: str, extra: dict | None = None) -> None: ...

    def reject(self, name: str, sender: str, seq: int, reason: str, size: int = 0, etype: str = "UNKNOWN",
               data: bytes | None = None, remove: bool = True, extra: dict | None = None, detail: str = "",
               attributable: bool = True) -> None: ...

    def remove(self, name: str) -> bool:
        """Remove an inbox file (an extension took what it needed): False if it was gone."""

    def run_on_lane(self, sender: str, name: str, task: Callable[[], None], cost: int = 0) -> bool: ...

    def take(self, name: str) -> bool: ...

    def dispatch(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """An accepted envelope (or assembled message): every extension sees it, then by type."""

    def dispatch_by_type(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """By type (§5.5 step 6), no extension asked."""

    def handle(self, message: Message) -> Exception | None:
        """Run the application's handlers; what one raised."""

    def run_later(self, task: Callable[[], None]) -> None:
        """Run `task` on the control lane of the worker pool, in order (RuntimeError once stopped)."""

    def watch(self, path: str, mask: int, key: str) -> None:
        """Watch a directory on the node's one inotify instance; events go to the extension `key`."""

    # ---------------------------------------------------------------- the node
    def publish(self) -> bool: ...

    def allow(self, name: str) -> bool: ...

    def revoke(self, name: str) -> bool: ...

    def extension(self, name: str) -> "Extension | None":
        """Another enabled extension, or None."""

    def status(self) -> dict[str, Any]:
        """The node's own account (control's `status`)."""

    def close(self) -> None: ...
