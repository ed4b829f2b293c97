"""What the figures cover: the summary says from how many of the nodes it names the journals come,
and SPC calls of callers that keep no journal (e.g. `speed call` processes) are counted from their
callees' records, without counting twice the calls of callers that do keep one. Spark (one run, and
the store with a call split across two batches) and the reference agree."""
from __future__ import annotations

import os

from pipeline_journals import T0, env, lease

from speedtui.pipeline.job import run_incremental, run_pipeline
from speedtui.pipeline.reference import analyze


def journals(d) -> tuple[dict[str, list[str]], list[str]]:
    """a calls b (both keep journals: b's records of a's calls must not count again); cli-1 and
    cli-2 call b and keep no journal. Returns (journal lines per node, b's lines after the cut)."""
    a = [lease(0, "a", "a", "registered")]
    b = [lease(0, "b", "b", "registered")]
    for i in range(3):                                   # a -> b: both sides journaled
        rid = f"a{i}"
        a.append(env(10 + i, "a", "out", "b", "SPC_REQUEST", 1 + i, 300, "sent", requestId=rid, service="echo"))
        b.append(env(10.1 + i, "b", "in", "a", "SPC_REQUEST", 1 + i, 300, "accepted", requestId=rid, service="echo"))
        b.append(env(10.2 + i, "b", "out", "a", "SPC_RESPONSE", 1 + i, 150, "sent", requestId=rid, service="echo",
                     status="SUCCESS"))
        a.append(env(10.3 + i, "a", "in", "b", "SPC_RESPONSE", 1 + i, 150, "accepted", requestId=rid,
                     service="echo", status="SUCCESS", latencyMs=3.0))
    late = []
    for caller, n in (("cli-1", 4), ("cli-2", 2)):       # only the callee's records
        for i in range(n):
            rid = f"{caller}-{i}"
            b.append(env(30 + i, "b", "in", caller, "SPC_REQUEST", 1, 300, "accepted", requestId=rid,
                         service="echo"))
            ok = i % 2 == 0
            resp = env(40 + i, "b", "out", caller, "SPC_RESPONSE", 1, 150, "sent", requestId=rid, service="echo",
                       status="SUCCESS" if ok else "ERROR", **({} if ok else {"errorCode": "EXECUTION_FAILED"}))
            (late if caller == "cli-2" else b).append(resp)   # cli-2's answers land in the next batch
    b.append(env(50, "b", "in", "cli-3", "SPC_REQUEST", 1, 300, "accepted", requestId="x", service="tax"))
    os.makedirs(d, exist_ok=True)
    return {"a": a, "b": b}, late


def check(s: dict, ref: dict) -> None:
    for key in ("spc", "totals", "coverage"):
        assert s[key] == ref[key], key
    (echo,) = [r for r in s["spc"] if r["service"] == "echo"]
    assert (echo["calls"], echo["successes"], echo["errors"]) == (3 + 4 + 2, 3 + 2 + 1, 2 + 1)
    (tax,) = [r for r in s["spc"] if r["service"] == "tax"]
    assert (tax["calls"], tax["no_response"]) == (1, 1)           # accepted, never answered
    assert s["coverage"] == {"journals": 2, "nodes": 5, "without_journal": ["cli-1", "cli-2", "cli-3"],
                             "spc_calls_from_callees": 7}


def test_calls_of_callers_without_a_journal_count_from_the_callee(spark, tmp_path):
    d = tmp_path / "traces"
    nodes, late = journals(d)
    for name, lines in nodes.items():
        (d / f"{name}.jsonl").write_text("\n".join(lines + (late if name == "b" else [])) + "\n")
    ref = analyze([str(d)])["summary"]
    check(run_pipeline([str(d)], str(tmp_path / "full"), spark=spark), ref)

    live = tmp_path / "live"                             # the store: cli-2's answers in a second batch
    live.mkdir()
    for name, lines in nodes.items():
        (live / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    run_incremental([str(live)], str(tmp_path / "store"), str(tmp_path / "r1"), spark=spark)
    with open(live / "b.jsonl", "a") as f:
        f.write("\n".join(late) + "\n")
    s = run_incremental([str(live)], str(tmp_path / "store"), str(tmp_path / "r2"), spark=spark)
    assert s["ingest"]["batches"] == 2
    check(s, ref)


def control_journal(d) -> None:
    """b, a node with the `control` extension, as its journal has it: an applied request and one
    refused after its signature verified (each answered by an SPC_RESPONSE without a service) and a
    file refused on its name alone (no request id: it authenticated as nobody)."""
    from speed_runtime.core import records as rt

    b = [lease(0, "b", "b", "registered"),
         rt.encode_line(rt.ControlTrace(T0 + 10, "b", "speed-cli-1", "ab12", "r1", "allow", {"peer": "x"},
                                        "applied")).rstrip("\n"),
         env(10.1, "b", "out", "speed-cli-1", "SPC_RESPONSE", 1, 300, "sent", requestId="r1", status="SUCCESS"),
         rt.encode_line(rt.ControlTrace(T0 + 20, "b", "speed-cli-2", "cd34", "r2", None, None, "rejected",
                                        "control_untrusted")).rstrip("\n"),
         env(20.1, "b", "out", "speed-cli-2", "SPC_RESPONSE", 1, 250, "sent", requestId="r2", status="ERROR",
             errorCode="ACCESS_DENIED"),
         rt.encode_line(rt.ControlTrace(T0 + 30, "b", "forged", None, None, None, None, "rejected",
                                        "bad_file")).rstrip("\n")]
    os.makedirs(d, exist_ok=True)
    (d / "b.jsonl").write_text("\n".join(b) + "\n")


def test_control_requests_are_calls_of_the_control_service(spark, tmp_path):
    """The report of a real environment counted the console's grants as calls of "(unknown)": a
    control request's answer names no service, and its request is a control record, not an
    envelope record. Now the authentic control records are the calls' request legs."""
    d = tmp_path / "traces"
    control_journal(d)
    ref = analyze([str(d)])["summary"]
    s = run_pipeline([str(d)], str(tmp_path / "full"), spark=spark)
    assert s["spc"] == ref["spc"] and s["totals"] == ref["totals"]
    assert [(r["target"], r["service"], r["calls"], r["successes"], r["errors"], r["no_response"]) for r in s["spc"]] \
        == [("b", "(control)", 2, 1, 1, 0)]
    assert s["totals"]["control_records"] == 3 and s["coverage"]["spc_calls_from_callees"] == 2

    lines = (d / "b.jsonl").read_text().splitlines(keepends=True)  # the store: r2's answer in a second batch
    live = tmp_path / "live"
    live.mkdir()
    (live / "b.jsonl").write_text("".join(lines[:4]))
    run_incremental([str(live)], str(tmp_path / "store"), str(tmp_path / "r1"), spark=spark)
    with open(live / "b.jsonl", "a") as f:
        f.write("".join(lines[4:]))
    s = run_incremental([str(live)], str(tmp_path / "store"), str(tmp_path / "r2"), spark=spark)
    assert s["ingest"]["batches"] == 2 and s["spc"] == ref["spc"]
