"""Themes: Textual ``Theme`` objects defined by the TOML files in ``themes/`` (repo) and in
the user's config directory (``themes/*.toml``).  Built-in copies are used when the repo's
``themes/`` directory is not next to the package (installed wheel, Python without tomllib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.theme import Theme

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

REPO_THEMES = Path(__file__).resolve().parent.parent / "themes"

_BUILTIN: list[dict[str, Any]] = [
    dict(name="speed-dark", dark=True, primary="#4EA8DE", secondary="#7B61FF", accent="#FFB454",
         warning="#FFB454", error="#F2545B", success="#5FD068", foreground="#D8DEE9",
         background="#10141A", surface="#161C24", panel="#1F2733",
         variables={"status-online": "#5FD068", "status-leaving": "#FFB454", "status-stale": "#F2545B"}),
    dict(name="speed-light", dark=False, primary="#1F6FB2", secondary="#6A4BD8", accent="#B35C00",
         warning="#B35C00", error="#C62828", success="#2E7D32", foreground="#1B1F24",
         background="#F7F8FA", surface="#FFFFFF", panel="#E6EAF0",
         variables={"status-online": "#2E7D32", "status-leaving": "#B35C00", "status-stale": "#C62828"}),
    dict(name="speed-high-contrast", dark=True, primary="#FFFF00", secondary="#00FFFF", accent="#FF00FF",
         warning="#FFFF00", error="#FF3030", success="#00FF00", foreground="#FFFFFF",
         background="#000000", surface="#000000", panel="#202020", luminosity_spread=0.25, text_alpha=1.0,
         variables={"status-online": "#00FF00", "status-leaving": "#FFFF00", "status-stale": "#FF3030"}),
]

_FIELDS = {"name", "primary", "secondary", "warning", "error", "success", "accent", "foreground",
           "background", "surface", "panel", "boost", "dark", "luminosity_spread", "text_alpha", "variables"}

ALIASES = {"dark": "speed-dark", "light": "speed-light", "high-contrast": "speed-high-contrast",
           "hc": "speed-high-contrast"}


def _from_dict(d: dict[str, Any]) -> Theme | None:
    if not isinstance(d.get("name"), str) or not isinstance(d.get("primary"), str):
        return None
    try:
        return Theme(**{k: v for k, v in d.items() if k in _FIELDS})
    except (TypeError, ValueError):
        return None


def load_themes(extra_dirs: list[Path] | None = None) -> dict[str, Theme]:
    themes: dict[str, Theme] = {}
    for d in _BUILTIN:
        t = _from_dict(d)
        if t:
            themes[t.name] = t
    if tomllib is not None:
        for folder in [REPO_THEMES, *(extra_dirs or [])]:
            if not folder.is_dir():
                continue
            for f in sorted(folder.glob("*.toml")):
                try:
                    t = _from_dict(tomllib.loads(f.read_text(encoding="utf-8")))
                except (OSError, ValueError):
                    continue
                if t:
                    themes[t.name] = t
    return themes


def resolve_theme_name(name: str) -> str:
    return ALIASES.get(name, name)


class ThemeKeeper:
    """The console's themes: the built-in and user ones registered with the app, the one chosen
    (the command line's, else the config's; an unknown name falls back to speed-dark with a
    warning), a change remembered in the config, and cycling with `t`."""

    def __init__(self, app: Any, config: Any, extra_dirs: list[Path], requested: str | None) -> None:
        self.app, self.config = app, config
        self.themes = load_themes(extra_dirs)
        self.requested = resolve_theme_name(requested) if requested else None

    def names(self) -> list[str]:
        return list(self.themes)

    def apply(self) -> None:
        app = self.app
        for theme in self.themes.values():
            app.register_theme(theme)
        name = self.requested or resolve_theme_name(self.config.theme)
        if name not in app.available_themes:
            if self.config.warning is None:
                app.notify(f"unknown theme {name!r}; using speed-dark", severity="warning")
            name = "speed-dark"
        app.theme = name

    def remember(self, theme: str) -> None:
        if theme in self.themes and theme != self.config.theme:
            self.config.theme = theme
            try:
                self.config.save()
            except OSError:
                pass  # the theme still changes; it is just not kept for the next start

    def next(self) -> None:
        app, names = self.app, self.names()
        current = app.theme if app.theme in names else names[0]
        app.theme = names[(names.index(current) + 1) % len(names)]
        app.notify(f"theme: {app.theme}")
