"""The console's layers, proven in a fresh interpreter: the models are pure (no Textual, no
threads, no files; of the runtime only its pure core, `speed_runtime.core`, whose judgements they
render), the services never import Textual, and only ui/ draws."""

import json
import subprocess
import sys

MODELS = ["access", "commands", "errors", "fabrics", "history", "keycheck", "liveness", "query", "registry", "timetravel",
          "replays", "traces"]
SERVICES = ["actions", "bridge", "clock", "config", "exports", "history", "journal_history", "registry", "runtime",
            "sources"]


def loaded_after(imports: list[str], watch: tuple[str, ...]) -> list[str]:
    code = ("import json, sys\n" + "".join(f"import {m}\n" for m in imports) +
            f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {watch!r} "
            "or m.startswith(('speedtui.services', 'speedtui.ui')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_models_are_pure():
    found = loaded_after([f"speedtui.models.{m}" for m in MODELS],
                         ("textual", "rich", "watchdog", "threading", "speed_runtime", "socket", "subprocess",
                          "platformdirs", "fcntl"))
    assert [m for m in found if m != "speed_runtime" and not m.startswith("speed_runtime.core")] == []
    assert "speed_runtime.core.liveness" in found  # the runtime's one verdict, not a console copy


def test_services_do_not_draw():
    found = loaded_after([f"speedtui.services.{m}" for m in SERVICES], ("textual", "rich"))
    assert [m for m in found if not m.startswith("speedtui.services")] == []
