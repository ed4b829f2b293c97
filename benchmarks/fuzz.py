"""Fuzz the runtime's pure readers: only their own errors, bounded time and memory (issue 5, case 15).

Targets and the one error each may raise:
  envelope  speed_runtime.core.envelope.open_envelope        EnvelopeError
  payload   speed_runtime.core.payloads.decode_payload       EnvelopeError
  registry  speed_runtime.core.entry.RegistryEntry.from_json BadEntryError
  keyfile   speed_runtime.core.keys.parse_key_text      KeyFileError
  filename  speed_runtime.core.envelope.parse_filename       (returns None, raises nothing)

Engines: `mutate` (built in: structure-aware mutation of valid seeds, random JSON, random bytes)
and `atheris` (coverage-guided libFuzzer, used when `import atheris` works).

  python benchmarks/fuzz.py --inputs 20000             # short mode (the CI test runs this)
  python benchmarks/fuzz.py --long                     # 1,000,000 mutated inputs per target, plus
                                                       # 200,000 atheris inputs per target (1,000,000 in all)
  python benchmarks/fuzz.py --engine atheris --target registry --inputs 200000

Prints one JSON document: per target and engine, inputs, unexpected errors (with a reproducer),
slowest input in ms, elapsed seconds and the process's peak RSS. Exit status 1 if any target
raised anything but its own error, exceeded the per-input time bound or the memory bound.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

TARGETS = ("envelope", "payload", "registry", "keyfile", "filename")
PER_INPUT_LIMIT_MS = 250.0   # any single input using more CPU time than this is a finding
RSS_LIMIT_MB = 1024          # peak resident memory of the fuzzing process


def _runtime():
    from speed_runtime.core import entry, envelope, keys, payloads
    from speed_runtime.core.errors import EnvelopeError, KeyFileError
    return envelope, keys, entry, payloads, EnvelopeError, KeyFileError


def make_target(name: str):
    """(function taking bytes, allowed exception type) for one target."""
    envelope, keyfile, lease, payloads, EnvelopeError, KeyFileError = _runtime()
    key = keyfile.Key(bytes(range(32)))
    if name == "envelope":
        return (lambda data: envelope.open_envelope(data, key, 4096)), EnvelopeError
    if name == "payload":
        def payload(data: bytes):
            etype = data[0] % 12 if data else 1  # 1..8 and a few unknown types
            return payloads.decode_payload(data[1:], etype)
        return payload, EnvelopeError
    if name == "registry":
        from speed_runtime.core import errors
        return lease.RegistryEntry.from_json, errors.BadEntryError
    if name == "keyfile":
        return keyfile.parse_key_text, KeyFileError
    if name == "filename":
        return (lambda data: envelope.parse_filename(data.decode("utf-8", "surrogateescape"))), ()
    raise SystemExit(f"unknown target {name}")


# ---------------------------------------------------------------- seeds
def seeds(name: str) -> list[bytes]:
    envelope, keyfile, lease, payloads, _, _ = _runtime()
    key = keyfile.Key(bytes(range(32)))
    src, dst = uuid.UUID(int=1).bytes, uuid.UUID(int=2).bytes
    bodies = [
        payloads.message("a", "b", {"n": 1, "text": "Grüße"}),
        payloads.message("a", "b", b"\x00\xffraw"),
        payloads.spc_request("a", "b", "r1", "echo", {"x": [1, 2]}, 5000),
        payloads.spc_success("b", "a", "r1", {"tax": 18.0}),
        payloads.spc_failure("b", "a", "r1", "TIMEOUT", "late"),
        payloads.event("a", "b", "leave"),
        payloads.heartbeat("a", "b", False),
        {"from": "a", "to": "b", "errorCode": "EXECUTION_FAILED", "errorMessage": "x", "refSeq": 3},
        payloads.ack("b", "a", 7),
    ]
    types = [1, 1, 2, 3, 3, 4, 6, 7, 8]
    if name == "envelope":
        out = []
        for etype, body in zip(types, bodies):
            raw = payloads.encode_payload(body)
            header = envelope.Header(etype, 7, 1_700_000_000_000, len(raw), src, dst, 1 if etype == 1 else 0)
            out.append(envelope.seal(header, raw, key, bytes(range(12))))
        return out
    if name == "payload":
        return [bytes([t]) + payloads.encode_payload(b) for t, b in zip(types, bodies)]
    if name == "registry":
        entry = lease.RegistryEntry(name="billing", id=str(uuid.UUID(int=5, version=4)), last_heartbeat=1.7e9,
                                    pid=1234, host="h", groups=("g",), allow=("a", "b"), services=("echo",),
                                    runtime="x", boot_id="B", boot_time_heartbeat=12.5,
                                    extra={"counters": {"sent": 1, "rejected": {"bad_tag": 2}}})
        return [entry.to_json(), json.dumps(entry.to_dict(), separators=(",", ":")).encode()]
    if name == "keyfile":
        k = base64.b64encode(bytes(range(32)))
        return [b"SPEED-KEY-V1\n" + k + b"\n", b"\r\nSPEED-KEY-V1\r\n\r\n" + k, b"SPEED-KEY-V1\n" + k[:-4]]
    if name == "filename":
        return [b"billing.6f1e2d3c.00000000000000000005.a5a6a7a8.env", b"a.00000000.18446744073709551615.00000000.env"]
    return [b""]


# ---------------------------------------------------------------- mutation engine
_INTERESTING_JSON = [
    b"null", b"true", b"false", b"0", b"-0", b"-1", b"1e999", b"-1e999", b"1" * 400, b"1" * 5000,
    b"18446744073709551616", b"9" * 30, b"1.5e308", b"NaN", b"Infinity", b'""', b'"\\ud800"', b'"\\u0000"',
    b"[]", b"{}", b"[" * 50 + b"]" * 50, b"[" * 3000 + b"]" * 3000, b'{"a":' * 200 + b"1" + b"}" * 200,
    b'"' + b"x" * 70000 + b'"', b"\xff", b'"\xc3\x28"', b"0.0000001", b"123456789012345678901234567890.5",
]
_INTERESTING_BYTES = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\n", b"\r", b"=", b"\x00" * 8, b"\xff" * 8]


def _random_json(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 4 or roll < 0.45:
        return rng.choice([None, True, False, 0, -1, 2**63, 2**64, 10**30, -(10**20), 1.5, -0.0, 1e308,
                           "", "x", "é🚀", "\u0000", "a" * rng.randint(0, 300), rng.randint(-2**70, 2**70),
                           rng.random() * 10**rng.randint(-5, 300)])
    if roll < 0.7:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    keys = ["from", "to", "data", "requestId", "service", "arguments", "callerNode", "timeoutMs", "status",
            "result", "errorCode", "errorMessage", "ackSeq", "event", "reply", "refSeq", "encoding", "name", "id",
            "pid", "host", "lastHeartbeat", "leaseSeconds", "heartbeatSeconds", "bootId", "bootTimeHeartbeat",
            "allow", "groups", "services", "protocol", "status", "x" * rng.randint(0, 20)]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 8))}


def _mutate_json(seed: bytes, rng: random.Random) -> bytes | None:
    """Replace, add or delete fields of a JSON object seed; None if the seed is not JSON."""
    prefix = b""
    if seed[:1] and seed[:1] not in b"{[ \n":
        prefix, seed = seed[:1], seed[1:]
    try:
        obj = json.loads(seed)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if obj and roll < 0.5:
            obj[rng.choice(list(obj))] = _random_json(rng)
        elif obj and roll < 0.7:
            obj.pop(rng.choice(list(obj)))
        else:
            extra = _random_json(rng, 3)
            obj.update(extra if isinstance(extra, dict) else {"k": extra})
    text = json.dumps(obj, allow_nan=True).encode()
    if rng.random() < 0.3:  # splice a raw token that json.dumps cannot produce
        token = rng.choice(_INTERESTING_JSON)
        pos = text.find(b":", rng.randrange(len(text)))
        if pos > 0:
            end = min(i for i in (text.find(b",", pos), text.find(b"}", pos), len(text)) if i >= 0)
            text = text[:pos + 1] + token + text[end:]
    return prefix + text


def mutate(seed: bytes, corpus: list[bytes], rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.25:
        mutated = _mutate_json(seed, rng)
        if mutated is not None:
            return mutated
    if roll < 0.3:
        return rng.randbytes(rng.randint(0, 400))
    data = bytearray(seed)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        pos = rng.randint(0, len(data))
        if op == 0 and data:  # bit flip
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and data:  # byte set
            data[rng.randrange(len(data))] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2:  # insert
            data[pos:pos] = rng.choice(_INTERESTING_BYTES + _INTERESTING_JSON[:12] + [rng.randbytes(rng.randint(1, 16))])
        elif op == 3 and data:  # delete a range
            del data[pos:pos + rng.randint(1, 32)]
        elif op == 4 and data:  # duplicate a range
            chunk = data[pos:pos + rng.randint(1, 64)]
            data[pos:pos] = chunk
        elif op == 5:  # truncate
            del data[rng.randint(0, len(data)):]
        elif op == 6:  # splice with another corpus entry
            other = rng.choice(corpus)
            cut = rng.randint(0, len(other))
            data = data[:pos] + bytearray(other[cut:])
        elif op == 7 and len(data) >= 8:  # overwrite an 8-byte field with an interesting integer
            i = rng.randrange(0, len(data) - 7)
            value = rng.choice((0, 1, 2**63, 2**64 - 1, 92, 64, rng.getrandbits(64)))
            data[i:i + 8] = value.to_bytes(8, "big")
    return bytes(data)


def _peak_rss_kb() -> int:
    """This process's own peak RSS. Not getrusage's ru_maxrss: Linux carries that over an exec, so
    a fuzzer started by a large process (a test run of 1 GB) would report its parent's peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu_ms(fn, allowed, data: bytes) -> float:
    t0 = time.thread_time()
    try:
        fn(data)
    except allowed:
        pass
    except Exception:
        pass  # already recorded as a finding on its first run
    return (time.thread_time() - t0) * 1000


def run_mutate(name: str, inputs: int, seed: int) -> dict:
    fn, allowed = make_target(name)
    rng = random.Random(seed)
    corpus = seeds(name)
    findings: list[dict] = []
    slowest, slowest_input = 0.0, b""
    started = time.perf_counter()
    for i in range(inputs):
        data = rng.choice(corpus) if i < len(corpus) else mutate(rng.choice(corpus), corpus, rng)
        t0 = time.thread_time()  # CPU time: a loaded machine must not turn into findings
        try:
            result = fn(data)
        except allowed:
            result = None
        except Exception as exc:  # a finding: the reader let another error escape
            if len(findings) < 20:
                findings.append({"input_b64": base64.b64encode(data[:4096]).decode(), "error": repr(exc)[:300]})
            result = None
        elapsed = (time.thread_time() - t0) * 1000
        if elapsed > slowest:
            slowest, slowest_input = elapsed, data
        if result is not None and len(corpus) < 200 and rng.random() < 0.01:
            corpus.append(data)  # inputs that parse make good seeds
    total = time.perf_counter() - started
    if slowest > PER_INPUT_LIMIT_MS:
        # A real finding is slow every time; a pause of the machine (a VM's stolen time counted as
        # ours, a descheduled core) is not. Time the slowest input again and keep the fastest run.
        slowest = min(_cpu_ms(fn, allowed, slowest_input) for _ in range(3))
    return {"target": name, "engine": "mutate", "inputs": inputs, "unexpected": findings,
            "slowestMs": round(slowest, 3), "slowestInputBytes": len(slowest_input),
            "seconds": round(total, 2), "inputsPerSecond": round(inputs / total) if total else None,
            "peakRssMb": round(_peak_rss_kb() / 1024, 1)}


# ---------------------------------------------------------------- atheris engine
def atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def _atheris_child(name: str, runs: int) -> None:
    import atheris
    with atheris.instrument_imports(include=["speed_runtime"]):
        fn, allowed = make_target(name)

    def one(data: bytes) -> None:
        try:
            fn(data)
        except allowed:
            pass

    corpus_dir = os.environ.get("SPEED_FUZZ_CORPUS") or tempfile.mkdtemp(prefix=f"speed-fuzz-corpus-{name}-")
    for i, s in enumerate(seeds(name)):
        with open(os.path.join(corpus_dir, f"seed{i}"), "wb") as f:
            f.write(s)
    atheris.Setup([sys.argv[0], f"-runs={runs}", f"-rss_limit_mb={RSS_LIMIT_MB}",
                   f"-timeout={max(1, int(PER_INPUT_LIMIT_MS / 1000 + 0.999))}", "-max_len=8192",
                   "-print_final_stats=1", corpus_dir], one)
    atheris.Fuzz()


def run_atheris(name: str, inputs: int) -> dict:
    started = time.perf_counter()
    corpus_dir = tempfile.mkdtemp(prefix=f"speed-fuzz-corpus-{name}-")
    try:  # libFuzzer exits without running atexit handlers: the parent cleans up
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--atheris-child", name, "--inputs",
                               str(inputs)], capture_output=True, text=True,
                              env={**os.environ, "SPEED_FUZZ_CORPUS": corpus_dir})
    finally:
        shutil.rmtree(corpus_dir, ignore_errors=True)
    total = time.perf_counter() - started
    log = proc.stderr
    runs = None
    for line in log.splitlines():
        if line.startswith("Done ") and " runs in " in line:
            runs = int(line.split()[1])
        if "stat::number_of_executed_units:" in line:
            runs = int(line.split(":")[-1])
    peak = None
    for line in log.splitlines():
        if "stat::peak_rss_mb:" in line:
            peak = int(line.split(":")[-1])
    crashed = proc.returncode != 0
    return {"target": name, "engine": "atheris", "inputs": runs, "unexpected": [log[-3000:]] if crashed else [],
            "seconds": round(total, 2), "inputsPerSecond": round(runs / total) if runs and total else None,
            "peakRssMb": peak, "exitCode": proc.returncode}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inputs", type=int, default=20_000, help="inputs per target (default 20,000)")
    p.add_argument("--long", action="store_true",
                   help="1,000,000 mutated inputs per target, plus 200,000 atheris inputs per target if available")
    p.add_argument("--atheris-inputs", type=int, default=None, help="atheris inputs per target (default: --inputs)")
    p.add_argument("--engine", choices=("mutate", "atheris", "both"), default=None)
    p.add_argument("--target", action="append", choices=TARGETS, help="default: all")
    p.add_argument("--seed", type=int, default=20260509)
    p.add_argument("--atheris-child", metavar="TARGET", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.atheris_child:
        _atheris_child(args.atheris_child, args.inputs)
        return 0
    inputs = 1_000_000 if args.long else args.inputs
    atheris_inputs = args.atheris_inputs or (200_000 if args.long else inputs)
    engine = args.engine or ("both" if args.long else "mutate")
    results = []
    for name in args.target or TARGETS:
        if engine in ("mutate", "both"):
            results.append(run_mutate(name, inputs, args.seed))
        if engine in ("atheris", "both"):
            if atheris_available():
                results.append(run_atheris(name, atheris_inputs))
            else:
                results.append({"target": name, "engine": "atheris", "inputs": 0, "unexpected": [],
                                "note": "atheris is not installed (pip install atheris)"})
    bad = [r for r in results if r["unexpected"] or (r.get("slowestMs") or 0) > PER_INPUT_LIMIT_MS
           or (r.get("peakRssMb") or 0) > RSS_LIMIT_MB]
    print(json.dumps({"results": results, "totalInputs": sum(r["inputs"] or 0 for r in results),
                      "limits": {"perInputMs": PER_INPUT_LIMIT_MS, "rssMb": RSS_LIMIT_MB},
                      "ok": not bad}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
