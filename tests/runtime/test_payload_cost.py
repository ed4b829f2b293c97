"""What a JSON text costs once decoded (core/payloads.py: json_structure, json_width, json_cost),
the figure every memory bound of the receiving path counts in (read-ahead, reassembly, SPC
requests waiting for a worker): it must never be below what decoding really takes. Each shape
below is decoded in a fresh interpreter, which reports the growth of its peak resident memory
(VmHWM)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from speed_runtime.core import payloads

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MiB = 1 << 20

# the costliest texts per byte we know of, and common ones; `n` objects of each
SHAPES = {
    "empty objects": '"[" + ",".join(["{}"] * n) + "]"',
    "empty lists": '"[" + ",".join(["[]"] * n) + "]"',
    "one-element lists": '"[" + ",".join(["[0]"] * n) + "]"',
    "nested lists": '"[" + ",".join(["[[0]]"] * n) + "]"',
    "one-key objects": '"[" + ",".join([\'{"a":0}\'] * n) + "]"',
    "objects of objects": '"[" + ",".join([\'{"a":{"b":{}}}\'] * n) + "]"',
    "floats": '"[" + ",".join(["1e1"] * n) + "]"',
    "short strings": '"[" + ",".join([\'"ab"\'] * n) + "]"',
    "two-byte characters": '"[" + ",".join([\'"\\u0100"\'] * n) + "]"',
    "astral characters": '"[" + ",".join([\'"\\U0001F600"\'] * n) + "]"',
    "a large object": '"{" + ",".join(\'"k%d":{}\' % i for i in range(n)) + "}"',
    "one ASCII string": '\'"\' + "x" * (8 * n) + \'"\'',
    "an ASCII string with one astral character": '\'"\' + "x" * (8 * n) + "\\U0001F600" + \'"\'',
    "escaped surrogates": '\'"\' + "\\\\ud83d\\\\ude00" * n + \'"\'',
    "records": '"[" + ",".join([\'{"id":12345,"name":"alice smith","mail":"a@example.com","on":true,"x":0.75}\'] * (n // 10)) + "]"',
}

PROBE = r"""
import gc, json, sys
from speed_runtime.core import payloads
n = int(sys.argv[2])
text = eval(sys.argv[1]).encode("utf-8")
cost = payloads.decoded_cost(text)
def status(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))
gc.collect()
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
base = status("VmRSS")
s = str(text, "utf-8")     # as the reassembly decodes: the text, then the value
value = payloads._loads(s)
print(json.dumps({"cost": cost, "peak": status("VmHWM") - base}))
"""


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_estimate_is_never_below_what_decoding_takes(shape):
    n = 300_000
    for env in ({}, {"MALLOC_MMAP_THRESHOLD_": "65536"}):  # glibc as it comes, and giving large blocks back at once
        out = subprocess.run([sys.executable, "-c", PROBE, SHAPES[shape], str(n)], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": REPO, **env}, timeout=120, check=True)
        seen = json.loads(out.stdout)
        assert seen["cost"] >= seen["peak"], f"{shape}: decoding took {seen['peak']} bytes, estimated {seen['cost']}"


def test_the_estimate_is_not_far_above_it_for_the_costliest_shapes():
    """Within about 2x for dense structure: a bound that is too loose refuses honest values."""
    text = ("[" + ",".join(["{}"] * 300_000) + "]").encode()
    assert payloads.decoded_cost(text) < 50 * len(text)   # measured: about 25 bytes per byte
    assert payloads.decoded_cost(b'"' + b"x" * MiB + b'"') < 3 * MiB + 4096  # the bytes, the text, the value


@pytest.mark.parametrize("text", [b"{" * 500, b"{}" * 250, b'"' * 500, '"😀"'.encode() * 100, b"[" * 999])
def test_small_texts_are_charged_a_worst_case_never_below_the_count(text):
    counted = payloads.json_cost(len(text), payloads.json_structure(text), payloads.json_width(text))
    assert len(text) <= payloads.SMALL_TEXT and payloads.decoded_cost(text) >= counted


def test_the_structure_of_pieces_adds_up_to_the_whole():
    text = json.dumps({"a": [{}, [], [1, {"b": "c"}], "x" * 50], "d": {}}).encode() * 3
    whole = payloads.json_structure(text)
    cut = [payloads.json_structure(text[start:start + 7]) for start in range(0, len(text), 7)]
    weights, quotes = sum(c[0] for c in cut), sum(c[1] for c in cut)
    assert quotes == whole[1] and weights >= whole[0]  # an "{}" or "[]" cut in two counts as non-empty


@pytest.mark.parametrize("text,width", [
    (b'{"a":"plain"}', 1),
    (b'{"a":"\\u00e9"}', 2),                    # an escape: counted wide (only overestimates)
    (b'{"a":"line\\nbreak \\"quoted\\""}', 1),    # escapes of ASCII characters
    ('{"a":"é"}'.encode(), 2),
    ('{"a":"\u4e2d"}'.encode(), 2),
    ('{"a":"\U0001F600"}'.encode(), 4),
    (b'{"a":"\\ud83d\\ude00"}', 4),
])
def test_the_width_is_that_of_the_widest_character(text, width):
    assert payloads.json_width(text) == width
