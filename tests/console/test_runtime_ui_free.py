"""speed_runtime never imports textual, rich or speedtui."""

import json
import subprocess
import sys


def test_runtime_imports_no_ui():
    code = ("import json, sys, speed_runtime, speed_runtime.cli, speed_runtime.node, speed_runtime.journal, "
            "speed_runtime.registry, speed_runtime.transport; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('textual', 'rich', 'speedtui', 'pyspark'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
