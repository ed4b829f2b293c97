"""The target side of the `control` extension (docs/PROTOCOL.md "### control").

A node started with trusted operator keys (`Node(..., operators=[PUBKEY, ...])`, `speed node
--operator PUBKEY`) advertises `control` and the keys' fingerprints (`"operators"`), and watches
`ROOT/NAME/control/` on its one inotify instance. Its inbox rules do not change (RFC §9.6: files of
senders it does not allow are discarded unread): control requests never enter the inbox. Every
file in control/ is judged on the protocol thread, in bounded steps (BATCH files per step, at most
MAX_NAMES names remembered), removed, and journaled as one `control` record; only a request
signed by a trusted operator for this name and instance, unexpired and not seen before, is
applied. A grant change is applied on the protocol thread at once (the next inbox file is judged
under it); the entry is published, the record journaled and the requester answered (an ordinary
SPC_RESPONSE, which the requester can receive only because it allows this node) on a lane of the
node's worker pool, in that order, so the protocol thread never waits for the registry lock.

Also here, for the console: `trusted_operators(entry)`, `trust_map(entries)`, `administers(entry,
fingerprint)` — who trusts which operator, read from registry entries.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

from ..node.context import ExtensionHost
from ..node.hooks import Extension
from ..node.watched_dir import WatchedDir
from ..core.control import (FEATURE, MAX_FILE, ControlRequest, ControlVerdict, RequestGuard, administers,
                            answer_error, answer_result, fingerprint, judge_control, open_control, parse_public_key,
                            trust_map, trusted_operators)
from ..core.envelope import EnvelopeType, parse_filename
from ..core.errors import ConfigError, DirectoryError, EntryTooLargeError
from ..core.receiving import Identity
from ..core.records import ControlTrace
from ..fsutil import close_quietly, ensure_private_dir
from ..inotify import INBOX_EVENTS
from ..transport import FileRejected, NotReady, read_inbox_file, remove_entry

__all__ = ["ControlExtension", "EXTENSION", "administers", "trust_map", "trusted_operators"]

CONTROL_DIR = "control"
BATCH = 32          # control files judged per step of the protocol thread: the inbox is never starved
MAX_NAMES = 1024    # names remembered; beyond, the directory is listed again once these are done


class ControlExtension(Extension):
    name = FEATURE

    def __init__(self, host: ExtensionHost):
        super().__init__(host)
        self._name, self._telemetry, self._config = host.name, host.telemetry, host.config
        if not host.config.operators:
            raise ConfigError("the control extension needs at least one trusted operator key: start the node "
                              "with --operator PUBKEY (Node(..., operators=[PUBKEY]))")
        self.trusted: dict[str, bytes] = {}
        for text in host.config.operators:
            key = parse_public_key(text)
            self.trusted[fingerprint(key)] = key
        self.guard = RequestGuard()
        self.path = os.path.join(host.root, host.name, CONTROL_DIR)
        self._me = Identity(host.name, host.id_bytes)
        self._lock = threading.Lock()  # steps (protocol thread) against stop (the closing thread)
        self._dir: WatchedDir | None = None  # control/, once started
        self._names: set[str] = set()
        self._need_listing = True
        self._deferred = False
        self._stop_handlers: list[Callable[[], None]] = []
        self._stop_requested = False

    # ------------------------------------------------------------------ public
    @property
    def operators(self) -> list[str]:
        """Fingerprints of the trusted operator keys (as advertised)."""
        return sorted(self.trusted)

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Call `callback()` (instead of closing the node on a thread of its own) when a trusted
        operator asks this node to stop; `speed node` uses it to leave its main loop."""
        self._stop_handlers.append(callback)

    # ------------------------------------------------------------------ hooks
    def watch(self) -> tuple[str, int]:
        self._prepare()
        return self.path, INBOX_EVENTS

    def start(self) -> None:  # (watched since `watch`, before the node registered)
        self._dir = WatchedDir(self._prepare, lambda path: self.host.watch(path, INBOX_EVENTS, self.name))

    def _prepare(self) -> str:
        return ensure_private_dir(self.path, what="control directory")

    def stop(self) -> None:
        with self._lock:
            watched, self._dir = self._dir, None
        if watched is not None:
            watched.close()

    def entry_fields(self) -> dict[str, Any]:
        return {"operators": self.operators}

    def hint(self, name: str) -> None:
        if name and len(self._names) < MAX_NAMES:
            self._names.add(name)
        else:  # the directory itself moved, or too many names: list it
            self._need_listing = True

    def step(self, listed: bool) -> bool:
        with self._lock:
            if self._dir is None:
                return False
            if listed or (self._need_listing and not self._names):
                self._list()
            self._deferred = False
            for name in sorted(self._names)[:BATCH]:
                self._names.discard(name)
                self._take(name)
            return bool(self._names) or self._deferred or (self._need_listing and self._dir is not None)

    # ------------------------------------------------------------------ the directory
    def _list(self) -> None:
        self._need_listing = False
        try:
            old = self._dir.adopt_replaced()  # a control directory replaced or removed: created and watched anew
            if old is not None:
                close_quietly(old)
                self._telemetry.recovered("inbox_replaced", f"its control directory {self.path} was replaced or "
                                                            "removed; watching the new one")
            listing = self._dir.list()
            try:
                if not listing.take(self._names.add, lambda: len(self._names) >= MAX_NAMES):
                    self._need_listing = True  # the rest after these
            finally:
                listing.close()
        except (OSError, DirectoryError) as exc:
            self._telemetry.problem("receiving_failed", f"cannot read its control directory: {exc}")

    # ------------------------------------------------------------------ one file
    def _take(self, name: str) -> None:
        """Judge one control file, remove it, then record, apply and answer (docs/PROTOCOL.md order)."""
        host = self.host
        parsed = parse_filename(name)
        if parsed is None:
            self._reject(name, "?", ControlVerdict("control_malformed", detail="not a control request file name"))
            return
        try:
            data, arrived = read_inbox_file(self._dir.fd, name, MAX_FILE, self._config.uids)
        except FileNotFoundError:
            return
        except NotReady:  # a link()+unlink() delivery in progress: look again shortly
            self._names.add(name)
            self._deferred = True
            return
        except FileRejected as exc:
            self._reject(name, parsed.sender, ControlVerdict(exc.reason, detail=exc.detail))
            return
        key, window = host.key, int(self._config.replay_window * 1000)
        opened = host.judge_as_delivered(parsed.sender, data, arrived, lambda entry, arrived_ms, *_: open_control(
            parsed.sender, data, key, self._me, entry, arrived_ms, window))
        if not opened.accepted:
            self._reject(name, parsed.sender, ControlVerdict(opened.reason, detail=opened.detail))
            return
        # the request's own expiry is judged now: a request is applied only while it is valid
        verdict = judge_control(opened.payload, self._me, self.trusted, self.guard, int(time.time() * 1000))
        if not remove_entry(self._dir.fd, self.path, name):
            self._telemetry.count("withdrawn")  # its requester withdrew it first: nothing happens
            return
        if verdict.request is None:
            self._record(parsed.sender, verdict)
            if verdict.request_id is not None:  # the envelope is authentic: tell the requester why
                self._later(lambda: self._answer(parsed.sender, answer_error(
                    self._name, parsed.sender, verdict.request_id, verdict.reason, verdict.detail)))
            return
        self._apply(parsed.sender, verdict.request)

    def _reject(self, name: str, peer: str, verdict: ControlVerdict) -> None:
        if remove_entry(self._dir.fd, self.path, name):
            self._record(peer, verdict)

    def _record(self, peer: str, verdict: ControlVerdict) -> None:
        telemetry = self._telemetry
        telemetry.count("controlRejected")
        telemetry.rejected(verdict.reason)
        telemetry.emit(ControlTrace(time.time(), self._name, peer, verdict.operator, verdict.request_id, None,
                                    None, "rejected", verdict.reason, verdict.detail))

    # ------------------------------------------------------------------ applying
    def _apply(self, requester: str, request: ControlRequest) -> None:
        """On the protocol thread: a grant change takes effect before the next inbox file is judged."""
        host, peer = self.host, request.arguments.get("peer")
        if request.command == "lift":  # the quota extension's quarantine; a node without it keeps no scores
            quota = host.extension("quota")
            changed = quota.lift(request.arguments["sender"]) if quota is not None else False
        else:
            try:
                changed = (host.allow(peer) if request.command == "allow"
                           else host.revoke(peer) if request.command == "revoke" else False)
            except EntryTooLargeError as exc:  # not applied: the entry in force stays, and says so
                self._telemetry.problem("grant_refused", str(exc))
                self._later(lambda: self._finish(requester, request, False, publishable=False))
                return
        self._later(lambda: self._finish(requester, request, changed))

    def _later(self, task: Callable[[], None]) -> None:
        try:
            self.host.run_later(task)
        except RuntimeError:  # the worker pool stopped with the node: nobody is left to answer
            pass

    def _finish(self, requester: str, request: ControlRequest, changed: bool, publishable: bool = True) -> None:
        """On the control lane: publish, journal, answer (then stop, for `stop`)."""
        published = (self.host.publish() if changed else True) if publishable else False
        self._telemetry.count("controlApplied")
        self._telemetry.emit(ControlTrace(time.time(), self._name, requester, request.operator, request.request_id,
                                         request.command, request.arguments, "applied"))
        result = self._result(request, changed, published)
        self._answer(requester, answer_result(self._name, requester, request.request_id, result))
        if request.command == "stop":
            self._stop()

    def _result(self, request: ControlRequest, changed: bool, published: bool) -> dict[str, Any]:
        if request.command in ("allow", "revoke"):
            return {"command": request.command, "peer": request.arguments["peer"], "changed": changed,
                    "published": published, "allow": self.host.status()["allow"]}
        if request.command == "stop":
            return {"command": "stop", "stopping": True}
        if request.command == "lift":
            return {"command": "lift", "sender": request.arguments["sender"], "lifted": changed,
                    "scores": self.host.extension("quota") is not None}
        status = self.host.status()
        return {"command": "status", **{k: status[k] for k in ("name", "id", "status", "allow", "services", "groups")},
                "operators": self.operators, **{k: status[k] for k in ("features", "pid", "counters")}}

    def _answer(self, requester: str, payload: dict[str, Any]) -> None:
        self.host.reply(requester, EnvelopeType.SPC_RESPONSE, payload,
                        trace_extra={"request_id": payload["requestId"], "status": payload["status"],
                                     "error_code": payload.get("errorCode")})

    def _stop(self) -> None:
        if self._stop_requested:
            return
        self._stop_requested = True
        if not self._stop_handlers:
            threading.Thread(target=self.host.close, name=f"speed-{self._name}-control-stop", daemon=True).start()
        for handler in list(self._stop_handlers):
            try:
                handler()
            except Exception:
                self._telemetry.count("handlerErrors")


EXTENSION = ControlExtension
