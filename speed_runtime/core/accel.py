"""Which form of the per-envelope work runs: the compiled module `_compiled` (C, built from
`core/_compiled.c` when the package is installed on a machine with a C compiler and the headers
of Python and libsodium), or pure Python.

The compiled form replaces, at import, `envelope.parse_filename`, `envelope.seal`,
`envelope.open_envelope`, `aead.encrypt`, `aead.decrypt`, `payloads.encode_payload`,
`payloads.decode_payload` and `records.envelope_line` (the journal's line for one envelope) with
twins that return the same values and raise the same errors (tests/runtime/test_compiled_form.py);
the pure functions stay, as the reference, as the fallback for inputs outside the compiled fast
path, and as the whole implementation when the module is missing. It also makes three system calls
of the hot path (`transport`'s rename without replacing, `fsutil`'s unlink and write keeping the
GIL) that are otherwise made through ctypes, at a tenth of the cost. `SPEED_PURE_PYTHON=1` in the
environment forces the pure form (the tests run under both; docs/BENCHMARKS.md has what each costs).
"""
from __future__ import annotations

import os

PURE_ENV = "SPEED_PURE_PYTHON"


def _load():
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None, f"pure Python ({PURE_ENV} is set)"
    try:
        from . import _compiled
    except ImportError:
        return None, "pure Python (the compiled module is not built)"
    return _compiled, "compiled"


compiled, FORM = _load()
