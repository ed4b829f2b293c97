"""What leaves the console as data: text copied to the terminal's clipboard (`y`), rows exported
to a file (`E`), and the analysis run noted in the audit log."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from speed_runtime.core.visible import visible_lines

from ...services.exports import write_export
from ...services.history import AuditLog
from .. import messages as msg
from ..port import UiPort


class Exports:
    def __init__(self, port: UiPort, audit: AuditLog, folder: Path, root: Path, now: Callable[[], float]) -> None:
        self.port = port
        self.audit = audit
        self.folder = folder  # where exports are written (the environment's folder of the console)
        self.root = root
        self.now = now

    def copy(self, text: str, what: str) -> None:
        # what members wrote reaches the clipboard (and the shell it is pasted into) as data
        text = visible_lines(text)
        self.port.copy_to_clipboard(text)  # OSC 52: works over SSH too
        self.port.notify(text if len(text) <= 300 else text[:300] + "…", title=f"copied {what}", timeout=8)

    def export(self, m: msg.ExportRows) -> None:
        try:
            path = write_export(self.folder, m.kind, m.suffix, m.lines, self.now())
        except OSError as exc:
            self.port.notify(f"the export could not be written: {exc.strerror or exc}", severity="error")
            return
        self.audit.note("export", m.detail, f"# wrote {path}", result=f"{len(m.lines)} lines")
        self.port.notify(str(path), title=f"exported {m.detail}", timeout=10)
        self.port.view_widget("audit").refresh_view(force=True)

    def analysis_finished(self, m: msg.PipelineFinished) -> None:
        """The Spark analysis of the journals finished: in the audit log, as the command it equals."""
        self.audit.note("analyze", f"journals in {self.root / 'speed_traces'}", f"speedtui analyze --dir {self.root}",
                        ok=m.ok, result="" if m.ok else m.error)
