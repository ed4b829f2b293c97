"""The console's layers, proven in a fresh interpreter: the models are pure (no Textual, no
threads, no files; of the runtime only its pure core, `speed_runtime.core`, whose judgements they
render), the services never import Textual, and only ui/ draws."""

import json
import subprocess
import sys

MODELS = ["access", "commands", "errors", "fabrics", "history", "keycheck", "liveness", "query", "registry", "timetravel",
          "replays", "traces"]
SERVICES = ["actions", "bridge", "clock", "config", "console", "exports", "extensions", "history", "journal_history",
            "operator", "own_nodes", "processes", "registry", "runtime",
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


def test_the_console_layers_contracts_hold(tmp_path):
    """pyproject.toml's "console layers" block (import-linter contracts), checked by lint-imports
    with the project's roots: every contract is kept."""
    import os
    import tomllib

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(repo, "pyproject.toml"), "rb") as f:
        contracts = [c for c in tomllib.load(f)["tool"]["importlinter"]["contracts"] if c["id"].startswith("console-")]
    assert {c["id"] for c in contracts} >= {"console-layers", "console-models-pure", "console-services-draw-nothing",
                                            "console-app-routes",
                                            "console-pipeline-apart"}
    config = tmp_path / "layers.toml"
    lines = ['[tool.importlinter]', 'root_packages = ["speed_runtime", "speedtui"]', 'include_external_packages = true']
    for c in contracts:
        lines.append("[[tool.importlinter.contracts]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in c.items()]
    config.write_text("\n".join(lines) + "\n")
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    out = subprocess.run([lint, str(config), "--no-cache"], capture_output=True, text=True, timeout=600,
                         cwd=repo, env={**os.environ, "PYTHONPATH": repo})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert f"Contracts: {len(contracts)} kept, 0 broken" in out.stdout
