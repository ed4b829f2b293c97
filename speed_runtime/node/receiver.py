"""The receiving half of a node: the protocol thread (wire contract §5.5).

It waits on the node's one inotify instance (inbox and registry directory), lists the inbox on
overflow and every `rescan_seconds` (in slices between its passes, so a huge inbox holds nobody
up), feeds each file's name, facts and bytes to the inbound state machine (`core.inbound`) and
carries out its actions: MESSAGEs to the sender's lane, SPC requests to the callee, responses and
acknowledgements to whoever waits for them. A file refused on its name alone (junk:
no envelope name, or a sender not allowed) is removed after the senders' files, a slice per pass.

Memory is bounded whatever senders do: the inbox is the queue. Per sender at most `read_ahead`
accepted envelopes wait for their handler (`read_ahead_total` from all senders), and no more while
what they cost decoded reaches `read_ahead_bytes_per_sender` (`read_ahead_bytes` from all senders,
node/readahead.py); the rest stay in the inbox, unread, and only their names are remembered (bounded too; beyond the bound the inbox
is listed again later). An accepted MESSAGE or request is removed from the inbox only when its
handler starts (§5.5 step 6: remove, then dispatch), so a `kill -9` loses at most the envelopes
being handled at that moment; what waits is still in the inbox for the next instance to judge.

No exception ends this thread: a failure is counted, reported (log, health event) and retried
with a short backoff; the node stops renewing its lease while the thread makes no progress (see
keeper.py), so a node that cannot read its inbox is never online and deaf. An inbox that was
replaced (`mv inbox inbox.old; mkdir inbox`) or removed is adopted anew, and what senders still
put in the old directory is moved over.
"""
from __future__ import annotations

import bisect
import threading
import time
from typing import Any, Callable

from ..core import payloads
from ..core.envelope import EnvelopeType, Header
from ..core.errors import DeliveryError
from ..core.message import Message, message_of
from ..core.reassembly import Assembled
from ..core.entry import RegistryEntry
from ..core.inbound import (CLOCK_EVERY, SLICE_SECONDS, AnswerProbe, Inbound, Judge, RegistryHint, Reject,
                            ResolveCall, RunHandler, SettleAck, SubmitRequest)
from ..core.receiving import Identity, Verdict
from ..core.records import EnvelopeTrace, envelope_event
from ..core.replay import ReplayGuard
from ..inotify import REGISTRY_EVENTS, Watch
from ..transport import FileRejected, NotReady, read_inbox_file, remove_entry
from . import hooks
from .calls import Callee, Caller, Request
from .context import Lifecycle, NodeContext
from .inbox import InboxDirectory, JunkNames, PendingNames
from .keeper import LeaseKeeper
from .readahead import ReadAhead
from .sender import Sender
from .telemetry import failure_text
from .threads import SerialLanes, WorkerPool, settle
from .watched_dir import DirListing

DEFER_SECONDS = 0.002  # a two-link file is looked at again this soon
LISTING_SPACING_MAX = 30.0  # the periodic listing of a huge inbox comes at least this often


class Receiver:
    def __init__(self, ctx: NodeContext, lifecycle: Lifecycle, keeper: LeaseKeeper, sender: Sender, caller: Caller,
                 callee: Callee, lane_pool: WorkerPool, reply: Callable[..., str | None]):
        # what it uses: the context (identity, key, settings, grants, telemetry, the registry's
        # cache, the application), the node's state (may it receive; is its name taken), the keeper
        # (registry hints), the sender (awaited acknowledgements), the caller (responses), the callee
        # (requests), the lanes of the handlers' pool, and `reply` for acknowledgements and probes
        self._ctx, self._lifecycle, self._keeper = ctx, lifecycle, keeper
        self._sender, self._caller, self._callee, self._reply = sender, caller, callee, reply
        self._telemetry, self._monitor, self._access = ctx.telemetry, ctx.monitor, ctx.access
        self._application = ctx.application
        cfg = self._config = ctx.config
        self.me = Identity(ctx.name, ctx.id_bytes)
        self.replay = ReplayGuard(int(cfg.replay_window * 1000), cfg.max_gap)
        self.inbound = Inbound(self.me, ctx.key, self.replay, cfg.max_payload)  # steps 1–6 (core/inbound.py)
        self._max_size = 92 + cfg.max_payload  # header + nonce + tag + payload
        self._uids = cfg.uids
        self._lock = threading.Lock()
        self._lane_pool = lane_pool
        self.lanes = SerialLanes(lane_pool, lambda exc: ctx.telemetry.count("handlerErrors"))
        self.read_ahead = ReadAhead(cfg.read_ahead, cfg.read_ahead_total, lambda: self.watch.wake(),
                                    cfg.read_ahead_bytes_per_sender, cfg.read_ahead_bytes)
        self._extensions: tuple = ()   # the node's extensions (§9), in order (attach)
        self._by_name: dict = {}
        self._names = PendingNames()
        self._junk = JunkNames()  # refused on the name alone, to be removed
        self._listing: DirListing | None = None  # a listing under way, taken in slices
        self._listing_drains = False  # the listing under way began while draining
        self._drain_listed = False  # while draining: a listing begun since the drain began has ended
        self._resume = ""  # a pass begins with the first sender after this name (the first sender rotates)
        self._cut = False  # the last step stopped a pass or junk removal at its slice: go on at once
        self._batch: dict[str, list] | None = None  # held files of this pass, per sender (run_on_lane)
        self._pass_entries: dict[str, Any] | None = None  # senders' entries as of this pass (_sender_entry)
        self.last_progress = time.monotonic()
        self._hints: list[str] = []  # names to look at again, from other threads
        self._extensions_busy = False  # an extension's step left work for the next one
        self.draining = threading.Event()
        self.drained = threading.Event()
        self._stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self._protocol_ident: int | None = None  # the thread's ident (Thread.ident is a property: asked per file)

    def attach(self, extensions: tuple) -> None:
        """The node's extensions (§9), once loaded: their hooks, payload layouts and directories."""
        self._extensions = extensions
        self._by_name = {e.name: e for e in extensions}
        self.inbound.use(hooks.decoder(self._by_name), hooks.overriding(extensions, "admit"),
                         hooks.overriding(extensions, "rejudge"))

    # ------------------------------------------------------------------ lifecycle
    def open(self, registry_dir: str | None) -> None:
        """Before registering: create the home, open the inbox and the watch, so nothing sent to
        us is missed."""
        self.watch = Watch()
        try:
            self.inbox = InboxDirectory(self._ctx.root, self._ctx.name, self.watch)
            self.inbox.watch()
            if registry_dir is not None:
                self.watch.add(registry_dir, REGISTRY_EVENTS, "registry")
            for extension in self._extensions:  # §9: an extension's own directory
                if (watched := extension.watch()) is not None:
                    self.watch.add(*watched, extension.name)
        except BaseException:
            self.close()
            raise

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name=f"speed-{self._ctx.name}-protocol", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def drain(self, deadline: float) -> bool:
        """Handle everything in the inbox now (after `leaving` was published), then stop taking
        files; returns False when the deadline came first."""
        self.drained.clear()
        self._drain_listed = False
        self.draining.set()
        self.watch.wake()
        return self.drained.wait(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        self._stopping.set()
        self.watch.wake()
        if self.thread is not None:
            self.thread.join()

    @property
    def tmp_path(self) -> str:
        return self.inbox.tmp_path

    def close(self) -> None:
        for part in (getattr(self, "watch", None), getattr(self, "inbox", None)):
            if part is not None:
                part.close()

    def look_again(self, names: list[str], timeout: float = 10.0) -> None:
        """Have the protocol thread look at these names as if inotify had named them (a late
        event), and wait until it has."""
        done = threading.Event()
        with self._lock:
            self._hints.extend(names)
            self._hints_done = done
        self.watch.wake()
        done.wait(timeout)

    def idle(self) -> bool:
        return self.read_ahead.idle()

    # ------------------------------------------------------------------ the loop
    def _loop(self) -> None:
        self._protocol_ident = threading.get_ident()
        next_listing = 0.0
        backoff = 0.0
        try:
            while not self._stopping.is_set():
                try:
                    next_listing = self._step(next_listing, backoff)
                    backoff = 0.0
                    self.last_progress = time.monotonic()
                except Exception as exc:  # nothing ends this thread: count, report, retry soon
                    self._telemetry.count("protocolErrors")
                    self._telemetry.problem("receiving_failed", f"cannot receive: {failure_text(exc)}")
                    backoff = min(1.0, backoff * 2 or 0.05)
                    self._abandon_listing()  # (it may be what failed) and events read may be lost
                    self._names.events_lost()
                    self._stopping.wait(backoff)
        finally:
            self._abandon_listing()

    def _step(self, next_listing: float, backoff: float) -> float:
        now = time.monotonic()
        if self._listing is not None or self._cut:
            wait = 0.0  # a listing runs, or a slice of work was cut: look for events and go on
            self._cut = False
        elif self._has_work() or self._extensions_busy:
            wait = DEFER_SECONDS
        else:
            wait = max(0.0, min(next_listing, self.inbox.next_old_check()) - now)
        events, overflow = self.watch.wait(wait)
        if overflow:
            self._telemetry.count("inotifyOverflows")
            self._keeper.wake(rescan=True)
            self._names.events_lost()
        if self._hints:
            with self._lock:
                hinted, self._hints, done = self._hints, [], self._hints_done
            events = events + [("inbox", name) for name in hinted]
        else:
            done = None
        for key, name in events:
            if key == "registry":
                self._keeper.hint(name)
            elif key != "inbox":
                self._by_name[key].hint(name)
            elif not name:
                self._names.events_lost()  # the inbox itself was moved or removed: look at it again
            else:
                self._remember(name)
        draining = self.draining.is_set()
        began = self._listing is None and (draining or self._names.need_listing or time.monotonic() >= next_listing)
        if began:
            if self.inbox.replaced():
                self._telemetry.count("inboxRecoveries")
                self._telemetry.recovered("inbox_replaced", f"its inbox {self.inbox.path} was replaced or "
                                                                "removed; receiving from the new one")
                self._names.events_lost()
            self._names.begin_listing()
            self._listing = self.inbox.list()
            self._listing_drains = draining
        if self._listing is not None and self._listing.slice(self._remember, SLICE_SECONDS):
            work, self._listing = self._listing.work, None
            self._names.end_listing()
            self._drain_listed = self._listing_drains and draining
            # the periodic listing is a backstop (overflows ask for one at once): over a huge backlog
            # it is spaced out so that it takes at most about 1% of this thread's time
            spacing = max(self._config.rescan_seconds, min(LISTING_SPACING_MAX, 100 * work))
            next_listing = time.monotonic() + spacing
        if self.inbox.draining_old and (events or time.monotonic() >= self.inbox.next_old_check()):
            # a replaced inbox is looked at when due (every quarter second), and before the files
            # a step found in the new one are judged: a sender writes to the old one until it
            # notices, so its next file in the new one follows files still in the old one (taken
            # first, they were replayed_sequence: lost)
            self.inbox.drain_old(self.read_ahead.taken, self._remember)
        self._lane_pool.start_waiting()  # handlers and services that could get no thread (out of
        self._callee.start_waiting()     # memory) get one now
        if self._lifecycle.may_receive():
            # an extension's files first: a grant revoked by a control request that this wake-up
            # found is in force before the inbox files it found are judged
            if self._extensions:
                self._extensions_busy = any([ext.step(began) for ext in self._extensions])
            self._receive()
            self._remove_junk()
            if draining and self._drain_listed and self._listing is None and not self._names and not self._junk \
                    and not self._names.need_listing:
                self.draining.clear()
                self.drained.set()
        elif draining:  # the lease is gone: nothing more may be taken
            self.draining.clear()
            self.drained.set()
        if done is not None:
            done.set()
        return next_listing

    def _abandon_listing(self) -> None:
        if self._listing is not None:
            self._listing.close()
            self._listing = None
            self._names.end_listing()

    # ------------------------------------------------------------------ knowing what is there
    def _remember(self, name: str) -> None:
        if name in self.read_ahead.taken or name in self._junk:
            return  # accepted and waiting for its handler, or refused already: not to be judged again
        if not self._names.remember(name, self._access.current):
            self._junk.add(name)

    def _has_work(self) -> bool:
        return bool(self._junk) or (bool(self._names) and self.read_ahead.has_room_for_any(self._names.senders()))

    def _remove_junk(self) -> None:
        """Files refused on their name alone, after the senders' files and a slice per pass: a
        flood of junk delays another sender's file by at most a slice, and costs O(1) per file."""
        junk = self._junk
        started, removed = time.monotonic(), 0
        while junk:
            name, sender, seq = junk.pop()
            self._reject(self.inbound.junk(name, sender, seq))
            removed += 1
            if removed % CLOCK_EVERY == 0 and time.monotonic() - started >= SLICE_SECONDS:
                self._cut = True
                break
        if junk.need_listing():
            self._names.need_listing = True

    # ------------------------------------------------------------------ judging
    def _receive(self) -> None:
        """Take files in turns, one per sender per turn (each sender's in sequence order), while
        the sender (and all) have room, for at most a slice: a sender with a backlog waits behind
        one file of every other sender, not behind its whole read-ahead. The first sender of a
        pass rotates (after a pass cut at its slice, the next one goes on where it stopped)."""
        self._batch, self._pass_entries = {}, {}
        try:
            self._take_in_turns()
        finally:
            batch, self._batch, self._pass_entries = self._batch, None, None
            for sender, held in batch.items():
                self.read_ahead.submit(self.lanes, sender, held)

    def _take_in_turns(self) -> None:
        senders = self._names.senders()
        if not senders:
            return
        first = bisect.bisect_right(senders, self._resume) % len(senders)
        senders = senders[first:] + senders[:first]
        self._resume = senders[0]  # the next pass begins with the sender after this one (it rotates)
        started, taken = time.monotonic(), 0
        while senders:
            again = []
            for sender in senders:
                if self.read_ahead.full():
                    return
                if not self.read_ahead.has_room(sender):
                    continue
                if self._lifecycle.state == "lost":
                    return
                item = self._names.pop(sender)
                if not self._receive_one(item[2], sender, item[1]):
                    self._names.push_back(sender, item)  # not ready (a link in progress): this sender waits
                elif self._names.has(sender):
                    again.append(sender)
                taken += 1
                # a pass is a slice too: a sender whose files are all rejected (they take no read-ahead)
                # must not keep the others' new files unseen for all of its backlog
                if taken % CLOCK_EVERY == 0 and time.monotonic() - started >= SLICE_SECONDS:
                    self._resume, self._cut = sender, True  # the next pass goes on after this sender
                    return
            senders = again

    def _receive_one(self, name: str, sender: str, file_seq: int) -> bool:
        """Carry one file through the inbound path (core/inbound.py, steps 1–6); False if it must be
        looked at again later."""
        self.last_progress = time.monotonic()  # a step through a large backlog is progress all along
        inbound = self.inbound
        # step 1 again, as grants stand now (PendingNames holds names of senders allowed when first
        # seen: a revoke since then refuses them unread), and the extensions' admission
        refused = inbound.admit(name, sender, file_seq, self._access.current)
        if refused is not None:
            self._reject(refused)
            return True
        try:  # step 2: the opened descriptor's facts, then its bytes
            data, arrived = read_inbox_file(self.inbox.fd, name, self._max_size, self._uids)
        except FileNotFoundError:
            return True
        except NotReady:
            return False
        except FileRejected as exc:
            self._reject(inbound.refused_file(name, sender, file_seq, exc.reason, exc.size, exc.type))
            return True
        verdict = self.judge_as_delivered(sender, data, arrived)  # steps 3–5
        if verdict.reason is not None:
            if verdict.reason == "wrong_target" and self._lifecycle.name_taken():
                return True  # the file belongs to the new owner of our name: leave it alone
            self._reject(inbound.rejected(name, sender, file_seq, verdict, data))
            return True
        self.dispatch(verdict, sender, data, name)
        return True

    def judge_as_delivered(self, sender: str, data: bytes, arrived: float, judge: Judge | None = None) -> Verdict:
        """Judge at the file's arrival: an envelope that waited in the inbox (the queue) is judged
        against the clock and the sender's entry as they were when it was delivered, so a backlog
        does not turn into stale_timestamp or unknown_sender rejections (docs/PROTOCOL.md reading 22).
        `judge(sender_entry, arrived_ms, sender, data)` replaces steps 3–5 (an extension's directory)."""
        # how long the file waited, on the kernel's clock that stamped its change time, as a time
        # on this runtime's clock
        waited = max(0.0, time.clock_gettime(time.CLOCK_REALTIME) - arrived)
        arrived = time.time() - waited
        return self.inbound.judge(sender, data, int(arrived * 1000), self._sender_entry(sender),
                                   lambda: self._monitor.departed(sender, data, arrived), judge)

    def _sender_entry(self, sender: str) -> RegistryEntry | None:
        """The sender's entry as its file is now (one stat), never a cached one the registry watch
        has not yet replaced: an instance that lost its name is not believed a moment longer. One
        look per sender and pass is enough: every file judged in a pass was delivered before the
        pass began, and an instance still registered after that was registered when they came."""
        entries = self._pass_entries
        if entries is None or threading.get_ident() != self._protocol_ident:
            return self._monitor.current(sender)
        if sender not in entries:
            entries[sender] = self._monitor.current(sender)
        return entries[sender]

    def reject(self, name: str, sender: str, seq: int, reason: str, size: int = 0, etype: str = "UNKNOWN",
               data: bytes | None = None, remove: bool = True, extra: dict | None = None, detail: str = "",
               attributable: bool = True) -> None:
        """An extension's rejection of an envelope that passed steps 1–5 (so, by default, it
        counts against its sender: it authenticated). `remove=False` keeps the file (a chunk the
        handler will remove)."""
        self._reject(Reject(name, sender, seq, reason, size, etype, data, attributable, detail), remove, extra)

    def _reject(self, r: Reject, remove: bool = True, extra: dict | None = None) -> None:
        """Remove and record a rejected file; only a rejection that counts against its sender
        reaches the extensions (`on_rejected`: threat scores), so that nothing a name in a file name
        merely claims, nor the receiver's own grants, counts against a sender (principle a)."""
        if remove and not self.remove(r.name):
            return  # gone: an earlier look (a rescan before this late event) already judged it
        self._telemetry.rejected(r.reason)
        self._telemetry.emit(EnvelopeTrace(time.time(), self._ctx.name, "in", r.sender, r.type, r.seq, r.size,
                                           "rejected", reason=r.reason, envelope=r.data, file=r.name,
                                           **(extra or {})))
        if r.counts_against_sender:
            for extension in self._extensions:
                extension.on_rejected(r.sender, r.name, r.reason, r.detail)

    # ------------------------------------------------------------------ dispatching
    def accepted(self, verdict: Verdict, sender: str, data: bytes, name: str, extra: dict | None = None) -> None:
        telemetry = self._telemetry
        telemetry.count("received")
        if verdict.gap:
            telemetry.count("gaps")
        if telemetry.observers:
            telemetry.emit(envelope_event(time.time(), self._ctx.name, "in", sender, verdict.type,
                                          verdict.header.sequence, len(data), "accepted", data, name, extra))

    def dispatch(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """An accepted envelope, or a message an extension assembled from several: every extension
        sees it first (§9), then `dispatch_by_type`."""
        for extension in self._extensions:
            if extension.on_envelope(verdict, sender, data, name):
                return
        self.dispatch_by_type(verdict, sender, data, name)

    def dispatch_by_type(self, verdict: Verdict, sender: str, data: bytes, name: str) -> None:
        """Carry out step 6 (core/inbound.py: Inbound.route). `name` is the inbox file that stays
        until the handler starts. A message assembled from chunks (`verdict.body` is an
        `Assembled`) has its size and its envelopes' records from them. `verdict.finished(handled,
        error)` is called once its handling ended."""
        payload = verdict.payload
        assembled = isinstance(verdict.body, Assembled)
        size = verdict.body.size if assembled else len(data)
        action = self.inbound.route(verdict, size, assembled)
        kind = type(action)
        if kind is RunHandler:
            if not assembled:
                mid = payload.get("messageId")
                self.accepted(verdict, sender, data, name, {"message_id": mid} if isinstance(mid, str) else None)
            if not self.run_on_lane(sender, name, lambda: self._run_message(verdict, sender, size, name), action.cost):
                if verdict.finished is not None:
                    verdict.finished(False, None)
            return
        if kind is SubmitRequest:
            self._submit(action, verdict, sender, data, name, assembled)
            return
        # everything else is settled here and now
        finished = verdict.finished or _nothing
        source_id = verdict.header.source_id
        if kind is ResolveCall or kind is SettleAck:
            if not self._awaited(action, sender, source_id, payload):
                self._reject(self.inbound.unexpected(name, sender, verdict, data, late=not self._asked(action, sender)))
                finished(False, None)
                return
        if not self.remove(name):
            self._telemetry.count("withdrawn")
            finished(False, None)
            return
        extra = self._caller.resolve(payload) if kind is ResolveCall else None
        if not assembled:
            self.accepted(verdict, sender, data, name, extra)
        finished(True, None)
        if kind is SettleAck:
            waiter = self._sender.take_ack(sender, source_id, action.seq)
            if waiter is not None:
                settle(waiter, action.seq, None if action.error is None else DeliveryError(
                    f"{sender} failed to handle message {action.seq}: {action.error}"))
        elif kind is AnswerProbe:
            self._answer_probe(sender)
        elif kind is RegistryHint:
            self._keeper.hint(action.file_name)

    def _submit(self, action: SubmitRequest, verdict: Verdict, sender: str, data: bytes, name: str,
                assembled: bool) -> None:
        """An SPC request to the callee (§5.6), its file held until a worker takes it."""
        payload, held = verdict.payload, action.cost
        finished = verdict.finished or _nothing
        self.read_ahead.hold(sender, name, self.inbox.fd, held)
        if not assembled:
            self.accepted(verdict, sender, data, name, {"request_id": payload["requestId"], "service": payload["service"]})
        deadline_ms = action.deadline_ms
        deadline = None if deadline_ms is None else time.monotonic() + (deadline_ms - time.time() * 1000) / 1000

        def done() -> None:
            self.read_ahead.release(sender, cost=held)
            finished(True, None)
        # a request that waits for a worker gives its read-ahead slot and reservation back, and its
        # cost moves to the callee's waiting budget until it finished
        self._callee.submit(Request(sender, payload["requestId"], payload["service"], payload["arguments"],
                                    deadline, lambda: self.take(name), done, verdict.cost))

    def _awaited(self, action: ResolveCall | SettleAck, sender: str, source_id: bytes, payload: dict) -> bool:
        """Whether the answer is awaited from exactly that instance of `sender`, in time."""
        if type(action) is ResolveCall:
            if self._caller.expects(sender, source_id, payload):
                return True
            if not self._caller.pending(action.request_id):
                self._telemetry.count("lateResponses")  # the caller gave up (timeout, cancel) first
            return False
        return self._sender.awaits_ack(sender, source_id, action.seq)

    def _asked(self, action: ResolveCall | SettleAck, sender: str) -> bool:
        """Whether the answer's request (or message) still waits for an answer from `sender` at all:
        if not, the answer is late (or answers something never asked); if so, another instance sent it."""
        if type(action) is ResolveCall:
            return self._caller.pending(action.request_id)
        return self._sender.ack_awaited(sender, action.seq)

    def _run_message(self, verdict: Verdict, sender: str, size: int, name: str) -> None:
        handled, error = False, None
        try:
            if not self.take(name):
                self._telemetry.count("withdrawn")
                return
            handled = True
            error = self._deliver_message(message_of(verdict, sender, size), verdict.header)
        finally:
            if verdict.finished is not None:
                verdict.finished(handled, error)

    def run_on_lane(self, sender: str, name: str, task: Callable[[], None], cost: int = 0) -> bool:
        """Hold an accepted file (it counts against the read-ahead, with `cost`: what its decoded
        payload holds in memory, and is not judged again) and run `task` on the sender's lane. The file stays in the inbox until the task removes it with
        `take(name)`; a task that leaves it lets a later listing look at it again. False when the
        handlers' pool has stopped with the node (the file stays for the next instance).
        During a pass of the protocol thread the tasks of each sender are collected and handed to
        its lane together at the end of the pass: one wake-up of a worker per sender and pass, not
        one per message (that hand-off had halved the one-way rate)."""
        if self._batch is not None and threading.get_ident() == self._protocol_ident:
            self.read_ahead.hold(sender, name, self.inbox.fd, cost)
            self._batch.setdefault(sender, []).append((name, task, cost))
            return True
        return self.read_ahead.run_on_lane(self.lanes, sender, name, self.inbox.fd, task, cost)

    def remove(self, name: str) -> bool:
        """Remove an inbox file an extension took over (a chunk whose piece is kept, an ACK, a
        duplicate): False if it was gone (its sender withdrew it)."""
        return remove_entry(self.inbox.fd, self.inbox.path, name)

    def run_later(self, lane: tuple, task: Callable[[], None]) -> None:
        """Run `task` on `lane` of the handlers' pool, after the lane's earlier tasks (RuntimeError
        once the pool stopped with the node)."""
        self.lanes.submit(lane, task)

    def watch_directory(self, path: str, mask: int, key: str) -> None:
        """Watch a directory on the node's one inotify instance; its events go to extension `key`."""
        self.watch.add(path, mask, key)

    def take(self, name: str) -> bool:
        """Remove a held file: True if this unlink removed it, False if its sender withdrew it."""
        return self.read_ahead.take(name, self.inbox.fd, self.inbox.in_memory)

    def _deliver_message(self, message: Message, header: Header) -> Exception | None:
        """Run the handlers, then answer an ACK or ERROR when the sender asked; what a handler raised."""
        exc = self._application.handle(message)
        me = self._ctx.name
        if exc is not None:  # said, not only counted (an echo to a full disk failed every message unseen)
            self._telemetry.problem(
                "handler_failed", f"its message handler failed on message {header.sequence} from {message.sender}: "
                f"{failure_text(exc)}" + ("; the sender is told it failed" if header.ack_requested else ""),
                key=f"{message.sender}:{type(exc).__name__}")
            if header.ack_requested:
                self._reply(message.sender, EnvelopeType.ERROR,
                            {"from": me, "to": message.sender, "errorCode": "EXECUTION_FAILED",
                             "errorMessage": f"message handler failed: {type(exc).__name__}",
                             "refSeq": header.sequence})
            return exc
        if header.ack_requested:
            self._reply(message.sender, EnvelopeType.ACK, payloads.ack(me, message.sender, header.sequence))
        return None

    def _answer_probe(self, sender: str) -> None:
        entry = self._monitor.get(sender) or self._monitor.refresh(sender)
        if entry is not None and self._ctx.name in entry.allow:
            self._reply(sender, EnvelopeType.HEARTBEAT, payloads.heartbeat(self._ctx.name, sender, True))


def _nothing(handled: bool, error: BaseException | None) -> None:
    pass
