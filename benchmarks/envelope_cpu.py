"""What the pure per-envelope work costs in each form (core/accel.py): the compiled module and
pure Python, piece by piece and for a whole leg, warm, in one thread; no files, no threads.

    python -m benchmarks.envelope_cpu [--rounds 2] [--calls 20000] [--size 64]
    python -m benchmarks.envelope_cpu --callgrind [--calls 2000]     # instructions per call

A checkout that was not installed has no compiled module: it is built from its source into a
temporary directory for the run (a C compiler and the headers of Python and libsodium are needed).

Each form runs in its own process (`SPEED_PURE_PYTHON=1` for the pure one), alternately: pure,
compiled, compiled, pure per round (A B B A). A piece's figure is the median over that form's runs
of the median of 5 batches of `--calls` calls. Under `--callgrind` each form runs once and a piece's
figure is the instructions of its loop divided by the calls (the same whatever the load).

- the send leg: the payload encoded (`payloads.encode_payload` of an SPC request), its header, the
  seal, the file name — what `Sender.send` asks of the core per envelope;
- the receive leg: the file name parsed (`receiving.judge_name`) and the envelope judged
  (`receiving.judge_envelope`: open, payload decode and checks, identities, replay) — what the
  protocol thread asks of the core per envelope.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import callgrind

PIECES = ["parse_filename", "encode_payload", "seal", "ChaCha20-Poly1305 alone", "open_envelope", "decode_payload",
          "replay check", "send leg", "receive leg"]


def pieces(calls: int, size: int) -> dict:
    """{piece: (setup per batch, the call)}: each call gets a fresh envelope where the core
    remembers what it saw (the replay window)."""
    from speed_runtime.core import aead, entry, envelope, payloads, receiving, replay
    from speed_runtime.core.envelope import EnvelopeType, Header
    from speed_runtime.core.keys import Key

    key = Key(os.urandom(32))
    peer = entry.RegistryEntry(name="cli", id="01010101-0101-4101-8101-010101010101", last_heartbeat=1000.0)
    me = receiving.Identity("srv", b"\x02" * 16)
    now = int(time.time() * 1000)
    request = payloads.spc_request("cli", "srv", os.urandom(16).hex(), "echo", {"p": "x" * size}, 30000)
    body = payloads.encode_payload(request)
    nonce = os.urandom(12)
    header = Header(EnvelopeType.SPC_REQUEST, 1, now, len(body), peer.id_bytes, me.id_bytes)
    data = envelope.seal(header, body, key, nonce)
    name = envelope.envelope_filename("cli", peer.id_bytes, 1, nonce)
    allowed = frozenset({"cli"})
    prefix = f"cli.{peer.id_bytes.hex()[:8]}."

    def fresh():
        """`calls` envelopes of increasing sequence, each with its own nonce and name."""
        guard = replay.ReplayGuard()
        batch = []
        for seq in range(1, calls + 1):
            n = os.urandom(12)
            batch.append((f"{prefix}{seq:020d}.{n[:4].hex()}.env",
                          envelope.seal(header._replace(sequence=seq), body, key, n), seq, n))
        return guard, iter(batch)

    def send_leg(_):
        sealed_body = payloads.encode_payload(request)
        n = os.urandom(12)
        out = envelope.seal(Header(EnvelopeType.SPC_REQUEST, 1, now, len(sealed_body), peer.id_bytes, me.id_bytes),
                            sealed_body, key, n)
        return out, f"{prefix}{1:020d}.{n[:4].hex()}.env"

    def receive_leg(state):
        guard, batch = state
        file_name, sealed, _, _ = next(batch)
        receiving.judge_name(file_name, allowed)
        return receiving.judge_envelope("cli", sealed, key, me, peer, guard, now, 1 << 20)

    def replay_check(state):
        guard, batch = state
        _, _, seq, n = next(batch)
        return guard.check(peer.id_bytes, "cli", seq, n, now, now)

    none = lambda: None  # noqa: E731
    return {
        "parse_filename": (none, lambda _: envelope.parse_filename(name)),
        "encode_payload": (none, lambda _: payloads.encode_payload(request)),
        "seal": (none, lambda _: envelope.seal(header, body, key, nonce)),
        "ChaCha20-Poly1305 alone": (none, lambda _: aead.encrypt(body, data[:64], nonce, key.raw)),
        "open_envelope": (none, lambda _: envelope.open_envelope(data, key, 1 << 20)),
        "decode_payload": (none, lambda _: payloads.decode_payload(body, EnvelopeType.SPC_REQUEST)),
        "replay check": (fresh, replay_check),
        "send leg": (none, send_leg),
        "receive leg": (fresh, receive_leg),
    }


def measure(calls: int, size: int) -> dict:
    """In this process: per piece, µs per call (median of 5 batches) — or, under callgrind, the
    marks around one batch."""
    mark = callgrind.marker()
    out = {}
    for piece, (setup, call) in pieces(calls, size).items():
        batches = []
        for _ in range(1 if mark else 5):
            state = setup()
            if mark:
                mark(f"start:{piece}")
            t0 = time.perf_counter()
            for _ in range(calls):
                call(state)
            batches.append((time.perf_counter() - t0) / calls * 1e6)
            if mark:
                mark(f"end:{piece}")
        out[piece] = statistics.median(batches)
    return out


def build_compiled(out: str) -> str:
    """The compiled module built from core/_compiled.c into `out` (a checkout run in place has
    none: only an install builds it), as tests/runtime/test_compiled_form.py builds it."""
    result = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", out, "--build-temp",
                             os.path.join(out, "tmp")], cwd=callgrind.REPO, capture_output=True, text=True)
    for directory, _, files in os.walk(out):
        for name in files:
            if name.startswith("_compiled.") and name.endswith(".so"):
                return os.path.join(directory, name)
    raise SystemExit("the compiled form could not be built (gcc, python3-dev and libsodium-dev are needed): "
                     + (result.stderr.strip().splitlines() or ["no output"])[-1])


def load_compiled(path: str) -> None:
    """Makes the module at `path` the one core/accel.py imports (before anything imports it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("speed_runtime.core._compiled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[spec.name] = module


def run_form(pure: bool, calls: int, size: int, under_callgrind: str | None = None, module: str | None = None) -> dict:
    env = {**os.environ, "SPEED_PURE_PYTHON": "1" if pure else "0"}
    argv = ["-m", "benchmarks.envelope_cpu", "--inner", "--calls", str(calls), "--size", str(size)]
    if module and not pure:
        argv += ["--module", module]
    if under_callgrind:
        callgrind.run(argv, under_callgrind, env={"SPEED_PURE_PYTHON": env["SPEED_PURE_PYTHON"]})
        counted = next(iter(callgrind.dumps(under_callgrind).values()))
        return {name.split(":", 1)[1]: count / calls for name, count in counted if name.startswith("end:")}
    path = os.pathsep.join(p for p in (callgrind.REPO, os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, *argv], env={**env, "PYTHONPATH": path}, cwd=callgrind.REPO,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=None, help="calls per batch (20000; 2000 under --callgrind)")
    parser.add_argument("--size", type=int, default=64, help="characters of the request's string argument")
    parser.add_argument("--callgrind", action="store_true", help="count instructions instead of timing")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--module", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    calls = args.calls or (2000 if args.callgrind else 20000)
    if args.inner:
        if args.module:
            load_compiled(args.module)
        from speed_runtime.core import accel

        if accel.compiled is None and os.environ.get("SPEED_PURE_PYTHON") == "0":
            raise SystemExit("the compiled form is not built (python setup.py build_ext --inplace)")
        print(json.dumps(measure(calls, args.size)))
        return 0
    if args.callgrind:
        callgrind.require()
    built = tempfile.mkdtemp(prefix="speed-compiled-")
    try:
        return compare(args, calls, None if installed() else build_compiled(built))
    finally:
        shutil.rmtree(built, ignore_errors=True)


def installed() -> bool:
    """Whether this checkout's compiled module is there (an install built it)."""
    import importlib.util

    return importlib.util.find_spec("speed_runtime.core._compiled") is not None


def compare(args: argparse.Namespace, calls: int, module: str | None) -> int:
    """The two forms' figures side by side; `module`: the compiled module to load, where this
    checkout has none."""
    if args.callgrind:
        results = {}
        for form, pure in (("pure", True), ("compiled", False)):
            directory = tempfile.mkdtemp(prefix="speed-callgrind-")
            try:
                results[form] = run_form(pure, calls, args.size, directory, module)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        unit, pure_v, compiled_v = "instructions", results["pure"], results["compiled"]
        print(f"instructions per call under callgrind, {calls} calls, {args.size}-character argument")
    else:
        runs: dict[str, list[dict]] = {"pure": [], "compiled": []}
        load = os.getloadavg()[0]
        for _ in range(args.rounds):
            for form in ("pure", "compiled", "compiled", "pure"):
                runs[form].append(run_form(form == "pure", calls, args.size, module=module))
        unit = "µs"
        pure_v, compiled_v = ({p: statistics.median(r[p] for r in runs[f]) for p in PIECES} for f in ("pure", "compiled"))
        print(f"µs per call, {args.rounds} A B B A round(s) of {calls} calls per batch, {args.size}-character "
              f"argument; load average {load:.1f} → {os.getloadavg()[0]:.1f}")
    print(f"| piece | pure Python, {unit} | compiled, {unit} | compiled ÷ pure |\n| --- | --- | --- | --- |")
    for piece in PIECES:
        fmt = (lambda v: f"{v:,.0f}") if args.callgrind else (lambda v: f"{v:.2f}")
        print(f"| {piece} | {fmt(pure_v[piece])} | {fmt(compiled_v[piece])} | {compiled_v[piece] / pure_v[piece]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
