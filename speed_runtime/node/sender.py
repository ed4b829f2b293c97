"""The sending half of a node (wire contract §5.3, §5.4): links, sealing, delivery, retraction,
acknowledgements, and the linger of a closing node.

A send reads the target's entry as its file holds it now (one stat, docs/PROTOCOL.md reading 20),
refuses a target that is missing, stale, leaving or whose process has exited, and checks the
grant; then it seals and delivers under the link's lock. After delivery it looks once more: if
the entry changed meanwhile (the target started leaving, restarted, or its process died), it
withdraws its file (`transport.retract`) and fails the send — unless the receiver already took
the file, in which case the send succeeded. So a graceful stop of the receiver, which publishes
`leaving` and then handles everything in its inbox, loses nothing that a send reported as sent.

Descriptors: each link keeps its target's tmp/ and inbox/ open, but at most MAX_OPEN_TARGETS
links do at once (least recently used closed first), so a node that talks to thousands of peers
keeps a bounded number of descriptors.
"""
from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from ..core.entry import RegistryEntry
from ..core.envelope import OVERHEAD, Header, seal, type_name
from ..core.errors import (AccessDeniedError, DeliveryError, NodeLeavingError, NodeUnavailableError,
                          PayloadTooLargeError)
from ..core.keys import Key
from ..core.liveness import EXPIRED, LEAVING, PROCESS_GONE, HostFacts, judge
from ..core.records import envelope_event
from ..fsutil import descriptor_budget
from ..monitor import RegistryMonitor
from ..transport import DirectoryGone, NameTaken, TargetDirs, deliver, retract
from .telemetry import Telemetry

MAX_OPEN_TARGETS = 32


def open_targets_budget() -> int:
    """How many targets may keep their two descriptors open: at most MAX_OPEN_TARGETS, and within
    a quarter of what this process may open (two each; the rest is for inboxes, journals, sockets…)."""
    return descriptor_budget(MAX_OPEN_TARGETS)
_RESEAL_ATTEMPTS = 8
_RECHECK_DIRS_SECONDS = 1.0  # how often a link checks that its descriptors still name the target's dirs


@dataclass
class _Link:
    """Outbound state per target name."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    next_seq: int = 1
    seq_for: str | None = None      # target instance the numbering is for (restarts at 1 for a new one)
    dirs: TargetDirs | None = None
    dirs_for: str | None = None     # target instance the descriptors were opened for
    dirs_checked: float = 0.0
    last_file: str | None = None    # newest envelope delivered on this link


class Sender:
    def __init__(self, root: str, name: str, id_bytes: bytes, key: Key, max_payload: int,
                 monitor: RegistryMonitor, facts: Callable[[], HostFacts], telemetry: Telemetry):
        self.root, self.name, self.id_bytes, self.key = root, name, id_bytes, key
        self.max_payload = max_payload
        self._monitor, self._facts, self._telemetry = monitor, facts, telemetry
        self._file_prefix = f"{name}.{id_bytes.hex()[:8]}."
        self._links: dict[str, _Link] = {}
        self._links_lock = threading.Lock()
        self._open: "OrderedDict[str, _Link]" = OrderedDict()  # links holding descriptors, LRU first
        self._max_open = open_targets_budget()
        self._acks: dict[tuple[str, int], tuple[bytes, Future]] = {}
        self._acks_lock = threading.Lock()
        self._extensions: tuple = ()  # the node's extensions (§9): admit_send, delivered (attach)

    def attach(self, extensions: tuple) -> None:
        """The node's extensions (§9), once loaded: each may hold a send back and hears of deliveries."""
        self._extensions = extensions

    # ------------------------------------------------------------------ the target
    def live_entry(self, target: str) -> RegistryEntry:
        """The target's entry as its file holds it now, if it may receive (§5.4 step 1)."""
        entry = self._monitor.current(target)
        if entry is None:
            raise NodeUnavailableError(target)
        verdict = judge(entry, time.time(), self._facts())
        if verdict.stale:
            raise NodeUnavailableError(target, _stale_detail(entry, verdict.reason))
        if verdict.state == LEAVING:
            raise NodeLeavingError(target)
        return entry

    def check_grant(self, target: str, entry: RegistryEntry) -> None:
        if self.name not in entry.allow:
            raise AccessDeniedError(f"node {target} does not allow {self.name}; grant it on {target} "
                                    f"(allow {self.name}) before sending", missing=(target, self.name))

    # ------------------------------------------------------------------ sending
    def send(self, target: str, etype: int, body: bytes, *, flags: int = 0, entry: RegistryEntry | None = None,
             before_deliver: Callable[[int], None] | None = None, trace_extra: dict | None = None,
             files: list[str] | None = None, sealed: list[bytes] | None = None, wait: float | None = None) -> int:
        """Deliver one envelope with `body` as its plaintext; returns its sequence number.
        `entry` is the target's entry when the caller has just judged it; `files` and `sealed`, when
        given, get the delivered file's name and its bytes. `wait`: how long an extension may hold
        the send back (quota), 0 not at all; None for answers, never held."""
        if entry is None:
            entry = self.live_entry(target)
        self.check_grant(target, entry)
        if len(body) > self.max_payload:
            raise PayloadTooLargeError(f"a payload of {len(body)} bytes exceeds this node's limit of "
                                       f"{self.max_payload} bytes; nothing was sent")
        link = self._links.get(target)
        if link is None:
            with self._links_lock:
                link = self._links.setdefault(target, _Link())
        with link.lock:
            for extension in self._extensions:  # e.g. quota: wait for room in the target's inbox
                entry = extension.admit_send(target, entry, etype, OVERHEAD + len(body), wait, link.lock)
            if link.seq_for != entry.id:  # a new receiver instance has no state for us: number from 1
                link.next_seq, link.seq_for = 1, entry.id
            seq = link.next_seq
            if before_deliver is not None:
                before_deliver(seq)
            stamp = self._monitor.stamp_of(target)
            data, filename = self._seal_and_deliver(link, target, entry, etype, seq, flags, body)
            link.next_seq, link.last_file = seq + 1, filename
            for extension in self._extensions:
                extension.delivered(target, entry, filename, len(data))
            self._confirm_delivery(link.dirs, target, entry, stamp, filename)
        if files is not None:
            files.append(filename)
        if sealed is not None:
            sealed.append(data)
        self._telemetry.count("sent")
        if self._telemetry.observers:
            self._telemetry.emit(envelope_event(time.time(), self.name, "out", target, type_name(etype), seq,
                                                len(data), "sent", data, filename, trace_extra))
        return seq

    def deliver_into(self, dirs: TargetDirs, target: str, entry: RegistryEntry, etype: int, seq: int, flags: int,
                     body: bytes, during: str = "the send",
                     withdrawn: str = "the envelope was withdrawn, nothing was delivered") -> str:
        """Seal `body` for `entry`'s instance and deliver it into `dirs` — the target's inbox, or a
        directory of an extension's (`control/`) — resealing with a new nonce on a name clash; then,
        as after every delivery, withdraw it if the target stopped being that live instance (the
        error names `during` and says `withdrawn`). Returns the file's name."""
        stamp = self._monitor.stamp_of(target)
        _, filename = self._seal_into(dirs, target, entry, etype, seq, flags, body)
        self._confirm_delivery(dirs, target, entry, stamp, filename, during, withdrawn)
        return filename

    def _confirm_delivery(self, dirs: TargetDirs, target: str, entry: RegistryEntry, stamp, filename: str,
                          during: str = "the send",
                          withdrawn: str = "the envelope was withdrawn, nothing was delivered") -> None:
        """After delivery: if the target stopped being the live instance we sealed for, withdraw
        the file, unless its receiver already took it."""
        if self._monitor.stamp_matches(target, stamp):
            return  # the entry judged live a moment ago is still the file's: the same instance, not leaving
        now_entry = self._monitor.refresh(target)
        verdict = None if now_entry is None else judge(now_entry, time.time(), self._facts())
        if now_entry is not None and now_entry.id == entry.id and verdict.state == "online":
            return
        if not retract(dirs, filename):
            return  # taken by the receiver in time: delivered
        self._telemetry.count("retracted")
        if verdict is not None and verdict.state == LEAVING:
            raise NodeLeavingError(target, f"it began to leave during {during}: {withdrawn}")
        detail = (_stale_detail(now_entry, verdict.reason) if verdict is not None and verdict.stale
                  else f"it stopped or restarted during {during}")
        raise NodeUnavailableError(target, f"{detail}; {withdrawn}")

    def _seal_and_deliver(self, link: _Link, target: str, entry: RegistryEntry, etype: int, seq: int, flags: int,
                          body: bytes) -> tuple[bytes, str]:
        """Seal and deliver under the link's lock; reopen a removed directory once."""
        self._ensure_dirs(link, target, entry.id)
        try:
            return self._seal_into(link.dirs, target, entry, etype, seq, flags, body)
        except DirectoryGone:
            self._close_dirs(link)
            self._ensure_dirs(link, target, entry.id)
            return self._seal_into(link.dirs, target, entry, etype, seq, flags, body)

    def _seal_into(self, dirs: TargetDirs, target: str, entry: RegistryEntry, etype: int, seq: int, flags: int,
                   body: bytes) -> tuple[bytes, str]:
        """Seal and deliver into `dirs`, resealing with a new nonce on a name clash (§5.4 step 4)."""
        for _ in range(_RESEAL_ATTEMPTS):
            nonce = os.urandom(12)
            data = seal(Header(etype, seq, int(time.time() * 1000), len(body), self.id_bytes, entry.id_bytes, flags),
                        body, self.key, nonce)
            self._telemetry.count("sealed")
            filename = f"{self._file_prefix}{seq:020d}.{nonce[:4].hex()}.env"
            try:
                deliver(dirs, filename, data)
                return data, filename
            except NameTaken:
                continue
        where = "inbox" if dirs.box == "inbox" else f"{dirs.box} directory"
        raise DeliveryError(f"could not find a free file name in {target}'s {where}")

    def _ensure_dirs(self, link: _Link, target: str, instance: str) -> None:
        now = time.monotonic()
        if link.dirs is not None and link.dirs_for == instance:
            if now - link.dirs_checked < _RECHECK_DIRS_SECONDS:
                self._touch(target, link)
                return
            link.dirs_checked = now
            if link.dirs.current():
                self._touch(target, link)
                return
        self._close_dirs(link)
        self._make_room(link)
        link.dirs, link.dirs_for, link.dirs_checked = TargetDirs(self.root, target), instance, now
        self._touch(target, link)

    def _touch(self, target: str, link: _Link) -> None:
        with self._links_lock:
            self._open[target] = link
            self._open.move_to_end(target)

    def _make_room(self, keep: _Link) -> None:
        """Close the descriptors of the least recently used links beyond the bound. A link busy on
        another thread (its lock taken) is skipped: its descriptors are in use."""
        with self._links_lock:
            candidates = [(t, link) for t, link in self._open.items() if link is not keep]
            excess = len(self._open) + 1 - self._max_open
        for target, link in candidates:
            if excess <= 0:
                break
            if link.lock.acquire(blocking=False):
                try:
                    self._close_dirs(link)
                    with self._links_lock:
                        self._open.pop(target, None)
                    excess -= 1
                finally:
                    link.lock.release()

    @staticmethod
    def _close_dirs(link: _Link) -> None:
        if link.dirs is not None:
            link.dirs.close()
            link.dirs = link.dirs_for = None

    # ------------------------------------------------------------------ acknowledgements
    def expect_ack(self, target: str, seq: int, source_id: bytes, waiter: Future) -> None:
        with self._acks_lock:
            self._acks[(target, seq)] = (source_id, waiter)

    def forget_ack(self, target: str, seq: int) -> None:
        with self._acks_lock:
            self._acks.pop((target, seq), None)

    def ack_awaited(self, sender: str, seq: int) -> bool:
        """Whether an acknowledgement of `seq` is awaited from `sender`, from any of its instances."""
        return (sender, seq) in self._acks

    def awaits_ack(self, sender: str, source_id: bytes, seq: int) -> bool:
        found = self._acks.get((sender, seq))
        return found is not None and found[0] == source_id

    def take_ack(self, sender: str, source_id: bytes, seq: int) -> Future | None:
        """The waiter of an ACK (or ERROR) from `sender`'s instance `source_id`; None when no such
        acknowledgement is awaited from that instance (§5.5 step 6: unexpected_response)."""
        with self._acks_lock:
            found = self._acks.get((sender, seq))
            if found is None or found[0] != source_id:
                return None
            del self._acks[(sender, seq)]
            return found[1]

    def pending_acks(self) -> list[Future]:
        with self._acks_lock:
            waiters, self._acks = [w for _, w in self._acks.values()], {}
        return waiters

    # ------------------------------------------------------------------ closing
    def linger(self, deadline: float) -> None:
        """Wait (until `deadline`, monotonic) until live receivers have taken in what we delivered:
        they check each envelope's source against our registry entry, which is about to go
        (§5.5 step 4). One file per link is enough: receivers read a link in sequence order."""
        with self._links_lock:
            links = [(t, link) for t, link in self._links.items() if link.last_file and link.dirs]
        for target, link in links:
            while time.monotonic() < deadline:
                try:
                    os.stat(link.last_file, dir_fd=link.dirs.inbox_fd, follow_symlinks=False)
                except (FileNotFoundError, OSError):
                    break
                entry = self._monitor.get(target)
                if entry is None or entry.id != link.dirs_for or judge(entry, time.time(), self._facts()).stale:
                    break  # nobody live will read it; it stays for the operator to see
                time.sleep(0.002)

    def close(self) -> None:
        with self._links_lock:
            links = list(self._links.values())
            self._open.clear()
        for link in links:
            self._close_dirs(link)



def _stale_detail(entry: RegistryEntry, reason: str) -> str:
    if reason == PROCESS_GONE:
        return f"its process (pid {entry.pid}) has exited"
    return f"its lease has expired ({reason})" if reason == EXPIRED else f"its entry is not live ({reason})"
