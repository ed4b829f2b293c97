"""Envelope inspector: header fields, payload as highlighted JSON, hex dump, tag check."""

from __future__ import annotations

import time

from rich.console import Group
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from speed_runtime.core.visible import visible, visible_json, visible_lines
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ...services import runtime as rt
from ...models.search import matching_lines, next_match
from ...models.traces import TraceRecord
from ..messages import CopyText
from ..views.common import highlighted
from .. import keymap


def envelope_renderable(rec: TraceRecord, secret: bytes | None, words: tuple[str, ...] = ()):
    """The inspector's content, with ``words`` (the traces filter's) marked wherever they appear."""
    summary = Table(box=None, show_header=False, padding=(0, 1))
    summary.add_column(style="bold", no_wrap=True)
    summary.add_column()
    # Text, never a str: a str cell of a rich table is markup, and the record's fields are a member's
    summary.add_row("record", highlighted(Text(f"{rec.node} {rec.dir} {rec.type} seq {rec.seq} → {rec.result}"),
                                          words))
    if rec.request_id:
        summary.add_row("request", highlighted(
            Text(f"{rec.request_id} {rec.service} {rec.status} {rec.error_code}".strip()), words))
    if not rec.envelope:
        return Group(summary, Text("\nthis record carries no sealed envelope: nothing to decrypt", style="yellow"))
    dec = rt.decode_envelope(rec.envelope, secret)
    parts: list = [summary]
    if dec.header is not None:
        h = dec.header
        hdr = Table(title="header (associated data, 64 bytes)", title_justify="left", box=None, padding=(0, 1),
                    show_header=False)
        hdr.add_column(style="bold cyan", no_wrap=True)
        hdr.add_column()
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h.timestamp_ms / 1000)) + f".{h.timestamp_ms % 1000:03d}Z"
        for k, v in [("version", h.version), ("type", f"{h.type} ({h.type_name})"),
                     ("flags", f"0x{h.flags:04x}" + (" ACK requested" if h.flags & 1 else "")),
                     ("header length", h.header_length), ("sequence", h.seq), ("timestamp", f"{h.timestamp_ms} ({ts})"),
                     ("payload size", h.payload_size), ("source node id", h.source_id),
                     ("target node id", h.target_id), ("nonce", h.nonce.hex())]:
            hdr.add_row(k, highlighted(Text(str(v)), words))
        parts.append(hdr)
    tag = (Text("tag check: ✓ authentic (ChaCha20-Poly1305 verified with this key)", style="bold green")
           if dec.tag_ok else Text(f"tag check: ✗ {visible(dec.problem or '')}", style="bold red"))
    parts.append(tag)
    if dec.payload is not None:
        parts.append(Text("payload", style="bold"))
        payload = Syntax(visible_json(dec.payload, indent=2), "json", theme="ansi_dark",
                         background_color="default", word_wrap=True)
        # searching: the highlighted JSON as Text, the words marked in it
        parts.append(highlighted(payload.highlight(payload.code), words) if words else payload)
    elif dec.payload_text:  # not JSON: the sender's text, its control characters written out
        parts.append(highlighted(Text(visible_lines(dec.payload_text)), words))
    parts.append(Text(f"sealed bytes ({len(rec.envelope)})", style="bold"))
    parts.append(Text(rt.hexdump(rec.envelope, limit=1024), style="dim"))
    return Group(*parts)


class EnvelopeScreen(ModalScreen[str | None]):
    BINDINGS = [Binding("escape,q", "dismiss(None)", "Close"), Binding("R", "dismiss('replay')", "Replay"),
                Binding("c", "dismiss('call')", "Follow call"), Binding("C", "dismiss('ascall')", "As call"),
                Binding("y", "copy_payload", "Copy payload"), *keymap.bindings("envelope")]

    def __init__(self, rec: TraceRecord, secret: bytes | None, words: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.rec = rec
        self.secret = secret
        self.words = words
        self._match_line: int | None = None  # the line n / N went to last

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide", id="envelope-dialog"):
            yield Static(Text(f"Envelope {self.rec.sender} → {self.rec.receiver}  ({self.rec.type})"),
                         classes="dialog-title")
            with VerticalScroll(id="envelope-scroll"):
                yield Static(envelope_renderable(self.rec, self.secret, self.words), id="envelope-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Replay (R)", id="replay", variant="warning")
                yield Button("Follow call (c)", id="call")
                yield Button("As call (C)", id="ascall")
                yield Button("Close", id="close")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "close" else event.button.id)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return bool(self.words) if action == "next_match" else True  # n: else the app's launch

    def action_next_match(self, step: int) -> None:
        """n / N: the inspector's next (previous) line holding a search word, at the top."""
        body = self.query_one("#envelope-body", Static)
        console = self.app.console
        rendered = console.render_lines(body.content, console.options.update_width(body.content_region.width),
                                        pad=False)
        lines = ["".join(seg.text for seg in line) for line in rendered]
        line = next_match(matching_lines(lines, self.words), self._match_line, forward=step > 0)
        if line is None:
            self.notify("no line of the envelope holds the filter's words", severity="warning")
            return
        self._match_line = line
        self.query_one("#envelope-scroll", VerticalScroll).scroll_to(y=line, animate=False, immediate=True)

    def action_copy_payload(self) -> None:
        """The decrypted payload (the console's only plaintext) to the clipboard, on request."""
        dec = None
        if self.rec.envelope and self.secret is not None:
            try:
                dec = rt.decode_envelope(self.rec.envelope, self.secret)
            except ValueError:
                dec = None
        if dec is None or dec.payload_text is None:
            self.notify("no decrypted payload to copy", severity="warning")
            return
        text = visible_json(dec.payload, indent=2) if dec.payload is not None else visible_lines(dec.payload_text)
        self.app.post_message(CopyText(text, "the decrypted payload"))
