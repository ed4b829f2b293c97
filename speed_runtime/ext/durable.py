"""The `durable` extension (docs/PROTOCOL.md, "### durable"): messages stored before a send returns,
forwarded when their target is online, handled once across crashes, acknowledged by chained receipts.

Receiving: a durable MESSAGE is bound to the receiver's name (a copy sealed for an earlier instance
of the name is still accepted, `core.durable.judge_carried`). On the sender's lane: the ledger says
whether (stream, id) was handled; if not, a claim is appended, the handler runs, the receipt is
appended and made durable (fdatasync), and only then is the file removed and the receipt sent back.
A crash before the receipt is on disk leaves the file in the inbox: the next instance handles it
again, marked `redelivered` (its handler was entered and did not return). A crash after it finds the
ledger's receipt for the copy: a duplicate, removed, its receipt sent again.

Sending: `send(target, data, durable=True)` stores the message in the outbox (durable_outbox.py) and
returns its id; the durable thread delivers, retries and expires.
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Iterator

from ..core import payloads
from ..core.durable import (MAX_STREAMS, NotDurableError, Receipt, StreamLedger, add_fields, compacted,
                            durable_flag, is_stream, judge_carried, ledger_line, parse_fields, receipt_from_json,
                            receipt_key, replay_ledger, stream_of)
from ..core.envelope import FLAG_BINARY, FLAG_CHUNK, FLAG_DURABLE, EnvelopeType
from ..core.errors import (AccessDeniedError, ConfigError, DeliveryError, DeliveryTimeoutError, EnvelopeError,
                           NodeUnavailableError, PayloadTooLargeError)
from ..core.entry import RegistryEntry, entry_integer
from ..core.liveness import judge
from ..core.message import message_of
from ..core.receiving import Verdict
from ..core.records import DurableTrace
from ..fsutil import close_quietly, descriptor_budget, local_facts
from ..node.context import ExtensionHost
from ..node.hooks import Extension, speaks
from .durable_outbox import MAX_RETRY_SECONDS, WINDOW, Outbox, TargetOutbox, expiry_record, next_retry, receipt_record
from .durable_store import AppendLog, Lineage, StoreError, Syncs, check_persistent, private_dir

log = logging.getLogger("speed_runtime")
_MESSAGE, _ACK = int(EnvelopeType.MESSAGE), int(EnvelopeType.ACK)
COMPACT_BYTES = 4 << 20      # a ledger log is compacted beyond this size
MAX_INSTANCES = 1024         # earlier instances of this name whose durable copies are still accepted
FIELDS_ROOM = 160            # bytes the durable fields add to a payload


class SenderLedger:
    """One sender's ledger log while it is open, and what was replayed from it."""

    __slots__ = ("sender", "log", "streams", "users", "unstored")

    def __init__(self, sender: str, log_: AppendLog, streams: dict[str, StreamLedger]):
        self.sender, self.log, self.streams, self.users = sender, log_, streams, 0
        # (stream, id) -> status: a handler returned but its receipt could not be stored; the next
        # copy stores it without running the handler again (lost with the ledger's eviction or a
        # restart: the claim on disk then marks the next run `redelivered`, as after a crash)
        self.unstored: dict[tuple[str, int], str] = {}


def _file_stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class Ledgers:
    """The receiver's ledger logs, one per sender, each used from that sender's lane only. At most
    `limit` are open (descriptor and replayed state): opening another closes the least recently
    used one that no lane is using (reopened and replayed from its file when its sender comes
    again), so descriptors and memory stay bounded whatever the number of senders.

    A ledger whose name no longer names the file held open (removed, or replaced by another file, a
    directory, a link: `AppendLog.in_place`, checked before each claim and each receipt) is never
    written again nor reopened by this instance: that sender's copies are refused as a store failure
    until the node is restarted (a fresh ledger would lose the floor and the chain). The descriptor
    is kept (at most `limit` of them) so that the operator can copy the ledger back from /proc."""

    def __init__(self, home_fd: int, home: str, name: str, rkey: bytes, syncs: Syncs, limit: int):
        self.name, self.rkey, self.syncs, self.limit = name, rkey, syncs, limit
        self.dir_fd, self.path = private_dir(home_fd, home, "ledger", syncs)
        self._open: "OrderedDict[str, SenderLedger]" = OrderedDict()
        self._refused: "OrderedDict[str, tuple[str, AppendLog | None]]" = OrderedDict()  # why, the held log
        # sender -> (the damaged ledger file's stamp, why): refused again without reading it while the
        # file is unchanged (each copy the sender retries would read the whole ledger); mended, read
        self._damaged: "OrderedDict[str, tuple[tuple[int, int, int, int], str]]" = OrderedDict()
        self._lock = threading.Lock()

    @contextmanager
    def use(self, sender: str) -> Iterator[SenderLedger]:
        """The sender's ledger, open while the block runs (StoreError when it cannot be opened)."""
        with self._lock:
            refused = self._refused.get(sender)
            book = self._open.get(sender)
            if refused is not None:
                raise StoreError(errno.ESTALE, refused[0])
            if book is not None:
                self._open.move_to_end(sender)
                book.users += 1
        if book is None:  # a sender's lane is serial: nobody else opens this one meanwhile
            known = self._damaged.get(sender)  # (a stat only for a ledger found damaged before)
            if known is not None and known[0] == self._stamp(sender):
                raise StoreError(errno.EBADMSG, known[1])
            log_ = AppendLog(self.dir_fd, f"{sender}.log", self.syncs, self.path)
            damaged: list[int] = []
            streams = replay_ledger(log_.lines, self.name, sender, damaged)
            if damaged:  # its torn last line was cut when opened: every line left was written whole
                stamp = _file_stamp(os.fstat(log_.fd))
                log_.close()
                why = (f"{log_.path} is damaged: line {damaged[0]}"
                       f"{f' (and {len(damaged) - 1} more)' if len(damaged) > 1 else ''} is not a record this "
                       "node wrote (mend the file, or remove it: then what it held is forgotten, and messages it "
                       "receipted may be handled again)")
                with self._lock:
                    self._damaged[sender] = (stamp, why)
                    while len(self._damaged) > self.limit:
                        self._damaged.popitem(last=False)
                raise StoreError(errno.EBADMSG, why)
            book = SenderLedger(sender, log_, streams)
            log_.lines = []
            book.users = 1
            with self._lock:
                self._damaged.pop(sender, None)
                self._open[sender] = book
                self._close_unused()
        try:
            yield book
        finally:
            with self._lock:
                book.users -= 1
                self._close_unused()

    def _stamp(self, sender: str) -> tuple[int, int, int, int] | None:
        try:
            return _file_stamp(os.stat(f"{sender}.log", dir_fd=self.dir_fd, follow_symlinks=False))
        except OSError:
            return None

    def _close_unused(self) -> None:
        if len(self._open) <= self.limit:
            return
        for sender in list(self._open):  # least recently used first
            book = self._open[sender]
            if book.users == 0:
                del self._open[sender]
                book.log.close()
                if len(self._open) <= self.limit:
                    return

    def _in_place(self, book: SenderLedger) -> None:
        """StoreError, and the sender refused from now on, when its ledger file was removed or replaced."""
        try:
            book.log.in_place()
        except StoreError as exc:
            if exc.errno != errno.ESTALE:
                raise
            why = (f"{exc}; {book.sender}'s durable messages are refused until the node is restarted, which starts "
                   f"from what is then at that path (copy the ledger back first, from /proc/{os.getpid()}/fd/"
                   f"{book.log.fd} while this node runs, or its floor and receipt chain start again)")
            with self._lock:
                if self._open.get(book.sender) is book:
                    del self._open[book.sender]
                self._refused[book.sender] = (why, book.log)
                held = [s for s, (_, l) in self._refused.items() if l is not None]
                for sender in held[:max(0, len(held) - self.limit)]:  # descriptors stay bounded
                    self._refused[sender][1].close()
                    self._refused[sender] = (self._refused[sender][0], None)
            raise StoreError(errno.ESTALE, why) from None

    def claim(self, book: SenderLedger, stream: str, msg_id: int) -> None:
        """Before the handler: no fsync (a lost claim only loses the `redelivered` mark)."""
        self._in_place(book)
        book.log.append(ledger_line("claim", {"stream": stream, "id": msg_id}), sync=False)
        book.streams[stream].claims.add(msg_id)

    def commit(self, book: SenderLedger, receipt: Receipt, base: int) -> str | None:
        """The receipt on disk (fdatasync) before the caller removes the envelope; StoreError when
        it is not. Returns why a due compaction failed (the receipt is committed all the same)."""
        self._in_place(book)
        book.log.append(ledger_line("receipt", {**receipt.to_json(), "base": base}), sync=True)
        book.streams[receipt.stream].record(receipt)
        if book.log.size > COMPACT_BYTES:
            try:
                book.log.replace(compacted(book.streams))
            except StoreError as exc:
                return str(exc)
        return None

    def snapshot(self) -> dict[str, list[dict]]:
        with self._lock:
            items = list(self._open.items())
        return {sender: [{"stream": l.stream, "receipts": l.index, "floor": l.floor, "claims": sorted(l.claims)}
                         for l in list(book.streams.values())] for sender, book in items}

    def close(self) -> None:
        with self._lock:
            for book in self._open.values():
                book.log.close()
            self._open.clear()
            for _, held in self._refused.values():
                if held is not None:
                    held.close()
            self._refused.clear()
        close_quietly(self.dir_fd)


def advertised_limit(entry: RegistryEntry) -> int | None:
    """The largest envelope payload `entry`'s node says it takes (extension `chunks`'s
    `maxEnvelopePayload`, §9's rule for numbers), if it says."""
    fields = entry.extra.get("chunks")
    limit = entry_integer(fields.get("maxEnvelopePayload")) if isinstance(fields, dict) else None
    return limit if limit is not None and limit >= 1 else None


class DurableExtension(Extension):
    name = "durable"

    def __init__(self, host: ExtensionHost):
        super().__init__(host)
        cfg = self._config = host.config
        self._name, self._id_bytes, self._key = host.name, host.id_bytes, host.key
        self._telemetry, self._monitor = host.telemetry, host.monitor
        self._layouts = "chunks" in cfg.features  # it reads the binary and chunk layouts (decode)
        self.warning = check_persistent(host.root, cfg.durable_on_tmpfs)
        self.syncs = Syncs(lambda n: host.telemetry.count("fsyncs", n))
        home_fd = os.open(os.path.join(host.root), os.O_RDONLY | os.O_DIRECTORY)
        try:
            node_fd, node_home = private_dir(home_fd, host.root, host.name, self.syncs)
            self.home_fd, self.home = private_dir(node_fd, node_home, "durable", self.syncs)
            os.close(node_fd)
        finally:
            os.close(home_fd)
        self.rkey = receipt_key(host.key.raw)
        self.outbox = Outbox(self.home_fd, self.home, host.key, self.syncs, cfg.outbox_limit, cfg.outbox_max_bytes)
        # (fewer under a low `ulimit -n`: 32 ledgers and 32 receipt targets beside the node's own
        # descriptors took a receiver of 60 senders past 32 and it lost its lease)
        self.ledgers = Ledgers(self.home_fd, self.home, host.name, self.rkey, self.syncs,
                               descriptor_budget(cfg.durable_open_ledgers))
        self.lineage = Lineage(host.root, cfg.uids, MAX_INSTANCES)
        self.instances: frozenset[bytes] = frozenset()
        self.started_ms = 0  # when this instance recorded itself: carried copies arrived before
        self._receipts: deque[tuple[str, Receipt]] = deque(maxlen=65_536)  # a dropped one comes again
        self._waiters: dict[tuple[str, int], Future] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self.closed = False
        self.thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.warning:
            log.warning("node %s: %s", self._name, self.warning)
        for what in self.outbox.skipped:
            self._telemetry.problem("durable_store_failed", f"durable outbox: {what}; left alone")
        self._record_instance()
        self.thread = threading.Thread(target=self._loop, name=f"speed-{self._name}-durable", daemon=True)
        self.thread.start()

    def _record_instance(self) -> None:
        """Append this instance's ID to `instances` (fdatasync) before anything is received or
        delivered: copies sealed for it stay ours after a restart (as a receiver), and copies it
        seals stay its sender's (as a sender, the lineage other receivers read)."""
        try:
            log_ = AppendLog(self.home_fd, "instances", self.syncs, self.home)
            try:
                known = [bytes.fromhex(line.decode()) for line in log_.lines
                         if is_stream(line.decode("ascii", "replace"))][-MAX_INSTANCES:]
                if len(log_.lines) >= MAX_INSTANCES:
                    log_.replace(b"".join(k.hex().encode() + b"\n" for k in known[-MAX_INSTANCES // 2:]))
                    known = known[-MAX_INSTANCES // 2:]
                log_.append(self._id_bytes.hex().encode() + b"\n", sync=True)
            finally:
                log_.close()
        except StoreError as exc:
            raise ConfigError(f"durable delivery cannot start: {exc}") from None
        self.instances = frozenset(known) | {self._id_bytes}
        self.started_ms = int(time.time() * 1000)

    def stop(self) -> None:
        self.closed = True  # what the protocol thread still hands over stays in the inbox for the next instance
        self._stopping.set()
        self._wake.set()
        if self.thread is not None:
            self.thread.join()
        self._store_receipts()
        for waiter in self._take_waiters():
            waiter.set_exception(DeliveryTimeoutError(f"node {self._name} closed before the receipt came; "
                                                      "the message stays in its outbox"))
        self.outbox.close()
        self.ledgers.close()
        close_quietly(self.home_fd)

    def _take_waiters(self) -> list[Future]:
        waiters, self._waiters = [w for w in self._waiters.values() if not w.done()], {}
        return waiters

    # ------------------------------------------------------------------ sending (the application's thread)
    def send(self, target: str, data: Any, *, ttl: float | None = None, confirm: bool = False,
             timeout: float = 10.0) -> int:
        """Store a MESSAGE durably for `target` and return its id (stream position). With confirm,
        wait for the receipt (handled: return; failed or expired: DeliveryError)."""
        host = self.host
        if not host.allows(target):  # else every receipt would be refused here and the message expire
            raise AccessDeniedError(f"durable messages to {target} are acknowledged by receipts that {target} "
                                    f"sends back, and this node does not allow {target}; nothing was stored: allow "
                                    f"it first (Node(..., allow=[{target!r}]), speed node --allow {target})")
        entry = self._monitor.current(target)
        limit = self._config.max_payload
        if entry is not None and not judge(entry, time.time(), local_facts()).stale:
            if not speaks(entry, "durable"):
                raise NotDurableError(f"node {target} does not speak the durable extension (its entry does not "
                                      "advertise it); nothing was stored: send without durable=True, or start "
                                      f"{target} with --durable")
            host.check_grant(target, entry)
            limit = min(limit, advertised_limit(entry) or limit)
        body = payloads.encode_payload(payloads.message(self._name, target, data))
        if len(body) + FIELDS_ROOM > limit:  # a copy the target refuses as too_large would wait for its TTL
            whose = "this node's" if limit == self._config.max_payload else f"{target}'s (its entry)"
            raise PayloadTooLargeError(f"a payload of {len(body)} bytes (with the durable fields) exceeds {whose} "
                                       f"limit of {limit} bytes; nothing was stored")
        ttl = self._config.durable_ttl if ttl is None else ttl
        if not 0 < ttl <= 30 * 86_400:
            raise ConfigError(f"ttl must be above 0 and at most 30 days, not {ttl!r}")
        now = time.time()
        waiter: Future | None = Future() if confirm else None
        try:
            stream, msg_id = self.outbox.store(target, body, ttl, now)
        except StoreError as exc:
            self._store_failed(f"durable outbox: {exc}")
            raise DeliveryError(f"{exc}; nothing was stored") from None
        if waiter is not None:
            self._waiters[(target, msg_id)] = waiter
        self._telemetry.count("durableStored")
        self._telemetry.emit(DurableTrace(now, self._name, target, "stored", stream, msg_id))
        self._wake.set()
        if waiter is not None:
            try:
                waiter.result(timeout)
            except TimeoutError:
                raise DeliveryTimeoutError(f"{target} did not receipt message {msg_id} within {timeout:g} s; it "
                                           "stays in the outbox and is delivered when it can be") from None
            finally:
                self._waiters.pop((target, msg_id), None)
        return msg_id

    # ------------------------------------------------------------------ the durable thread
    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(0.2)
            self._wake.clear()
            try:
                self._store_receipts()
                self._deliver_and_expire()
            except StoreError as exc:
                self._store_failed(f"durable outbox: {exc}")
                self._stopping.wait(0.5)
            except Exception as exc:  # the thread outlives any one failure
                self._telemetry.count("protocolErrors")
                self._telemetry.problem("receiving_failed", f"durable outbox: {type(exc).__name__}: {exc}")
                self._stopping.wait(0.5)

    def _store_failed(self, detail: str) -> None:
        """A durable store could not be written: counted, and a line on stderr and in the journal
        (at most once a minute for the same failure)."""
        self._telemetry.count("durableStoreErrors")
        self._telemetry.problem("durable_store_failed", detail)

    def _store_receipts(self) -> None:
        items = []
        while self._receipts:
            target, r = self._receipts.popleft()
            box = self.outbox.targets.get(target)
            if box is not None and box.stream == r.stream:
                items.append((box, r.id, receipt_record(r)))
        done, failed = self.outbox.finish(items)
        if failed is not None:
            self._store_failed(f"cannot store receipts in the durable outbox: {failed}; the messages stay "
                               "in the outbox and their receipts come again with the next copies")
        for box, p, record in done:
            r = record["receipt"]
            self._telemetry.count("durableReceipts")
            self._telemetry.emit(DurableTrace(time.time(), self._name, box.target, "receipt", box.stream, p.id,
                                                  r["status"], r["index"]))
            self._settle(box.target, p.id, r["status"], "")

    def _settle(self, target: str, msg_id: int, status: str, detail: str) -> None:
        waiter = self._waiters.get((target, msg_id))
        if waiter is None or waiter.done():
            return
        if status == "handled":
            waiter.set_result(msg_id)
        else:
            waiter.set_exception(DeliveryError(f"message {msg_id} to {target} was not handled: {status}"
                                               + (f" ({detail})" if detail else "")))

    def _deliver_and_expire(self) -> None:
        now, mono = time.time(), time.monotonic()
        expired: list[tuple[TargetOutbox, int, dict]] = []
        for target, box in list(self.outbox.targets.items()):
            if not box.pending:
                continue
            entry = self._monitor.current(target)
            state = judge(entry, now, local_facts()).state if entry is not None else "gone"
            live = state == "online"
            # an instance that is leaving drains its inbox: a copy it holds may still be handled, and
            # its receipt decides (expiring it here, the two sides could disagree about the message)
            holding = state in ("online", "leaving")
            if live and not speaks(entry, "durable"):
                reason = f"node {target} does not speak the durable extension"
                with self.outbox.lock:
                    expired += [(box, p.id, expiry_record(box.stream, p.id, reason, now)) for p in box.pending.values()]
                continue
            with self.outbox.lock:  # send() adds entries from other threads
                pending = list(box.pending.values())
            outstanding = sum(1 for p in pending if live and p.delivered_to == entry.id)
            for p in pending:
                if now * 1000 > p.expires_ms and not (holding and p.delivered_to == entry.id):
                    why = "its time-to-live ran out before " + (
                        f"{target} receipted it" if p.copies else f"{target} was online to take it")
                    expired.append((box, p.id, expiry_record(box.stream, p.id, why, now)))
                elif live and (p.delivered_to != entry.id or mono >= p.next_try):
                    if p.delivered_to != entry.id and outstanding >= WINDOW:
                        continue
                    if not self._deliver(box, p, entry, mono):
                        break
                    outstanding += p.copies == 1 or 0
        done, failed = self.outbox.finish(expired)
        if failed is not None:
            self._store_failed(f"cannot record expired messages in the durable outbox: {failed}; they stay "
                               "in the outbox until it can")
        for box, p, record in done:
            why = record["expired"]["reason"]
            self._telemetry.count("durableSendErrors")
            self._telemetry.emit(DurableTrace(now, self._name, box.target, "send_error", box.stream, p.id,
                                                  "expired", None, why))
            self._settle(box.target, p.id, "expired", why)

    def _deliver(self, box: TargetOutbox, p, entry, mono: float) -> bool:
        """One copy, sealed for the target's current instance; False when the target refused (try later)."""
        try:
            body, fields = self.outbox.payload(box, p.id)
        except (OSError, ValueError) as exc:
            self._telemetry.problem("durable_store_failed", f"durable outbox entry {box.target}/{p.id}: {exc}",
                                        key=f"entry:{box.target}")
            p.next_try = mono + MAX_RETRY_SECONDS
            return True
        try:
            # wait=0: a copy keeps within the target's published limits (quota), or is tried later
            self.host.send(box.target, _MESSAGE, add_fields(body, fields), flags=FLAG_DURABLE, entry=entry,
                                  wait=0.0)
        except (NodeUnavailableError, AccessDeniedError, DeliveryError):
            return False
        first = p.delivered_to != entry.id
        p.delivered_to, p.copies = entry.id, p.copies + 1
        p.next_try = mono + next_retry(self._config.durable_retry_seconds, p.copies)
        self._telemetry.count("durableDelivered")
        self._telemetry.emit(DurableTrace(time.time(), self._name, box.target, "delivered", box.stream, p.id,
                                              detail="" if first and p.copies == 1 else f"copy {p.copies}"))
        return True

    # ------------------------------------------------------------------ receiving (the protocol thread)
    def decode(self, plaintext: bytes, etype: int, flags: int) -> None:
        """A durable MESSAGE is one envelope of the v1 layout (docs/PROTOCOL.md, "Combinations"):
        with the binary or chunk bit too, at a node that reads those layouts, it is bad_payload,
        as the C node judges it (no sender sets both)."""
        if etype == _MESSAGE and flags & FLAG_DURABLE and flags & (FLAG_BINARY | FLAG_CHUNK) and self._layouts:
            raise EnvelopeError("bad_payload", "a durable message is one envelope of the v1 layout, "
                                               "never binary or chunked")
        return None

    def rejudge(self, verdict: Verdict, sender: str, data: bytes, arrived_ms: int) -> Verdict:
        if verdict.reason not in ("wrong_target", "unknown_sender") or not durable_flag(data):
            return verdict
        host = self.host
        again = judge_carried(sender, data, self._key, self._name, self._id_bytes, self.instances, self.started_ms,
                              lambda source: self._sender_instance(sender, source, data, arrived_ms),
                              host.replay, arrived_ms, self._config.max_payload)
        return again if again.accepted else verdict

    def _sender_instance(self, sender: str, source_id: bytes, data: bytes, arrived_ms: int) -> bool:
        """Whether `source_id` is an instance of `sender`: its registered one (also one that was
        registered when the file arrived, reading 22), or one its own lineage file records."""
        monitor = self._monitor
        entry = monitor.current(sender)
        if entry is not None and entry.id_bytes == source_id:
            return True
        if monitor.departed(sender, data, arrived_ms / 1000) is not None:
            return True
        return source_id in self.lineage.ids(sender)

    def on_envelope(self, verdict: Verdict, sender: str, data: bytes, name: str) -> bool:
        header = verdict.header
        if not header.flags & FLAG_DURABLE or header.type not in (_MESSAGE, _ACK):
            return False
        host = self.host
        if header.type == _ACK:
            try:
                receipt = receipt_from_json(verdict.payload.get("receipt"), sender, self._name)
            except ValueError:
                receipt = None
            if receipt is None or not receipt.valid(self.rkey):
                host.reject(name, sender, header.sequence, "durable_bad_receipt", len(data), verdict.type, data)
                return True
            if host.remove(name):
                host.accepted(verdict, sender, data, name)
                self._receipts.append((sender, receipt))
                self._wake.set()
            return True
        try:
            fields = parse_fields(verdict.payload)
        except EnvelopeError:
            host.reject(name, sender, header.sequence, "bad_payload", len(data), verdict.type, data)
            return True
        host.run_on_lane(sender, name, lambda: self._handle(verdict, fields, sender, data, name),
                             verdict.cost + len(data))  # the task holds the envelope's bytes too
        return True

    # ------------------------------------------------------------------ handling (the sender's lane)
    def _handle(self, verdict: Verdict, fields, sender: str, data: bytes, name: str) -> None:
        """On the sender's lane (one at a time per sender): judge against the ledger, claim, handle,
        commit, remove, acknowledge. A ledger that cannot be written acknowledges nothing: the copy
        is removed unhandled (or, when its handler already returned, its status is kept for the next
        copy), the failure is reported, and the sender delivers the message again."""
        if self.closed:
            return
        try:
            with self.ledgers.use(sender) as book:
                self._handle_in(book, verdict, fields, sender, data, name)
        except (StoreError, MemoryError) as exc:
            self._store_failed(f"cannot store durable receipts for {sender}: {str(exc) or 'out of memory'}; its "
                               "messages are not acknowledged (they stay in its outbox) until the ledger can be "
                               "written")
            self.host.take(name)  # unacknowledged: the sender's outbox delivers it again
        except Exception as exc:  # never left to be judged again (a replayed nonce, counted against the sender)
            self._telemetry.count("protocolErrors")
            self._telemetry.problem("receiving_failed", f"durable message from {sender}: "
                                        f"{type(exc).__name__}: {exc}", key=f"durable:{type(exc).__name__}")
            self.host.take(name)

    def _handle_in(self, book: SenderLedger, verdict: Verdict, fields, sender: str, data: bytes, name: str) -> None:
        host = self.host
        seq = verdict.header.sequence
        ledger = stream_of(book.streams, fields.stream)
        if ledger is None:  # a sender's streams are bounded (a new stream means its durable state is new)
            host.reject(name, sender, seq, "durable_streams_full", len(data), verdict.type, data)
            self._telemetry.problem("durable_store_failed", f"{sender} already has {MAX_STREAMS} durable streams in "
                                   f"the ledger of {self._name}: a copy of a new stream was refused", key=sender)
            return
        ledger.advance(fields.base)
        seen = ledger.seen(fields.id)
        if seen:  # a copy of what was handled (or finished for the sender): removed, its receipt sent again
            host.reject(name, sender, seq, "durable_duplicate", len(data), verdict.type, data)
            self._telemetry.count("durableDuplicates")
            self._telemetry.emit(DurableTrace(time.time(), self._name, sender, "duplicate", fields.stream, fields.id,
                                             seen.status if isinstance(seen, Receipt) else None,
                                             seen.index if isinstance(seen, Receipt) else None))
            if isinstance(seen, Receipt):
                self._send_receipt(sender, seen, seq)
            return
        key = (fields.stream, fields.id)
        status = book.unstored.get(key)
        if status is None and book.unstored:
            raise StoreError(0, "an earlier receipt of this sender is not stored yet")
        host.accepted(verdict, sender, data, name)
        if status is not None:
            pass  # its handler returned before: only the receipt is missing
        elif time.time() * 1000 > fields.expires_at_ms:
            status = "expired"  # no handler starts after the time-to-live (the sender may report it expired)
        else:
            redelivered = fields.id in ledger.claims
            self.ledgers.claim(book, fields.stream, fields.id)
            message = dataclasses.replace(message_of(verdict, sender, len(data)), durable_id=fields.id,
                                          redelivered=redelivered)
            error = host.handle(message)
            status = "handled" if error is None else "failed"
            if error is not None:
                self._telemetry.problem("handler_failed", f"the message handler raised {type(error).__name__}"
                                       f"({str(error)!r}) on durable message {fields.id} from {sender}: it is "
                                       "receipted as failed", key=f"{sender}:{type(error).__name__}")
        receipt = ledger.issue(self.rkey, self._name, sender, fields.id, status, int(time.time() * 1000))
        try:
            compaction = self.ledgers.commit(book, receipt, fields.base)
        except StoreError:
            book.unstored[key] = status
            raise
        book.unstored.pop(key, None)
        if compaction is not None:
            self._store_failed(f"cannot compact the durable ledger of {sender}: {compaction}")
        host.take(name)  # after the receipt is on disk: the ledger and the inbox never disagree
        self._telemetry.count("durableHandled")
        self._telemetry.emit(DurableTrace(time.time(), self._name, sender, "handled", fields.stream, fields.id, status,
                                         receipt.index))
        self._send_receipt(sender, receipt, seq)

    def _send_receipt(self, sender: str, receipt: Receipt, seq: int) -> None:
        """Back to the sender, if its current entry still speaks durable (a v1 node never gets one)."""
        host = self.host
        entry = self._monitor.current(sender)
        if entry is None or not speaks(entry, "durable"):
            return
        body = payloads.encode_payload({"from": self._name, "to": sender, "ackSeq": seq, "receipt": receipt.to_json()})
        try:
            host.send(sender, _ACK, body, flags=FLAG_DURABLE, entry=entry)
        except Exception:  # the sender will deliver another copy and get it again
            self._telemetry.count("undeliverable")

    # ------------------------------------------------------------------ state (CLI, console)
    def outbox_items(self) -> list[dict[str, Any]]:
        """What waits in this node's outbox: target, id, created, expires, copies delivered, to which instance."""
        return [{"target": t, "id": p.id, "created": p.created, "expiresAt": p.expires_ms / 1000, "size": p.size,
                 "copies": p.copies, "deliveredTo": p.delivered_to} for t, p in self.outbox.items()]

    def ledger_state(self) -> dict[str, list[dict]]:
        return self.ledgers.snapshot()


EXTENSION = DurableExtension
