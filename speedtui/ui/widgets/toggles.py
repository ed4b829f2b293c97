"""Check boxes and radio buttons whose state reads without colour: the mark is drawn only when on
(Textual draws it in both states and tells them apart by colour alone)."""

from __future__ import annotations

from textual.widgets import Checkbox, RadioButton


class OnOffCheckbox(Checkbox):
    @property
    def BUTTON_INNER(self) -> str:  # type: ignore[override]  # noqa: N802 - Textual's name
        return "X" if self.value else " "


class OnOffRadioButton(RadioButton):
    @property
    def BUTTON_INNER(self) -> str:  # type: ignore[override]  # noqa: N802 - Textual's name
        return "●" if self.value else " "
