"""One version, one source: pyproject.toml's version is the installed distribution's, which
`speed --version`, `speedtui --version` and both packages' `__version__` print; CHANGELOG.md has an
entry for it that names the wire contract revision it speaks."""
import os
import re
import subprocess
import sys
from importlib import metadata

import speed_runtime
import speedtui

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALLED = metadata.version(speed_runtime.DISTRIBUTION)


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_both_commands_print_the_installed_version():
    assert _run("speed_runtime", "--version").stdout == f"speed {INSTALLED}\n"
    assert _run("speedtui", "--version").stdout == f"speedtui {INSTALLED}\n"
    assert speed_runtime.__version__ == speedtui.__version__ == INSTALLED


def test_the_changelog_has_an_entry_for_the_version_of_pyproject_with_its_contract_revision():
    pyproject = open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8").read()
    version = re.search(r'(?m)^version = "([^"]+)"$', pyproject).group(1)
    changelog = open(os.path.join(REPO, "CHANGELOG.md"), encoding="utf-8").read()
    entries = re.split(r"(?m)^## ", changelog)[1:]
    assert entries[0].split()[0] == version, "the newest CHANGELOG entry is pyproject.toml's version"
    for entry in entries:
        assert re.search(r"Wire contract revision 1\.\d", entry), entry.splitlines()[0]


def test_starting_a_node_reads_no_package_metadata():
    """Reading the metadata costs tens of milliseconds; only --version and __version__ pay it."""
    code = ("import sys, speed_runtime.cli, speed_runtime.node, speed_runtime.ext.chunks, speed_runtime.ext.quota; "
            "speed_runtime.cli.build_parser(); print('importlib.metadata' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=REPO).stdout == "False\n"
