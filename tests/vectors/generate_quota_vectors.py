"""Known-answer vectors of the `quota` extension (docs/PROTOCOL.md "Extensions (§9)" › `quota`),
written from that text with json and math only — not with speed_runtime — so that the runtime
(tests/ext/test_quota_vectors.py) and the C node (`speed_c_node kat-quota`) are checked against
an independent reading.

    python tests/vectors/generate_quota_vectors.py > tests/vectors/quota_vectors.json

Three kinds of vector:
- `limits`: a registry entry (as JSON text, so that number spellings reach the parser as written)
  and a sender name -> the limits that sender must honour, or null for none;
- `admission`: limits and a run of steps (a send of N bytes, or files leaving the inbox) -> for
  each send, "ok" or the limit that blocks it, judged on the files still present;
- `bucket`: a rate and burst and a run of attempts at given milliseconds -> the delay each would
  have to wait (0: a token was taken).
"""
from __future__ import annotations

import json
import math
import sys

CAP_PENDING, CAP_BYTES, CAP_RATE, CAP_BURST = 65536, 2 ** 53, 1_000_000.0, 65536


# ------------------------------------------------------------------ the reading rules, restated
def entry_number(v):
    """A number of an entry: its value as a double; beyond a double's range it is missing."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


def valid_integer(v, cap):
    v = entry_number(v)
    if v is None or v != math.floor(v) or v < 1:
        return None
    return int(cap) if v > cap else int(v)


def valid_rate(v):
    v = entry_number(v)
    if v is None or v <= 0:
        return None
    return CAP_RATE if v > CAP_RATE else v


def limits(entry_text, sender):
    entry = json.loads(entry_text)
    if "quota" not in (entry.get("features") or []):
        return None
    q = entry.get("quota")
    if not isinstance(q, dict):
        return None
    pending, nbytes = valid_integer(q.get("pending"), CAP_PENDING), valid_integer(q.get("pendingBytes"), CAP_BYTES)
    if pending is None or nbytes is None:
        return None
    rate, burst = valid_rate(q.get("rate")), valid_integer(q.get("burst"), CAP_BURST)
    senders = q.get("senders")
    o = senders.get(sender) if isinstance(senders, dict) else None
    if isinstance(o, dict):
        pending = valid_integer(o.get("pending"), CAP_PENDING) or pending
        nbytes = valid_integer(o.get("pendingBytes"), CAP_BYTES) or nbytes
        rate = valid_rate(o.get("rate")) or rate
        burst = valid_integer(o.get("burst"), CAP_BURST) or burst
    out = {"pending": pending, "pendingBytes": nbytes, "rate": None, "burst": None}
    if rate is not None:
        out["rate"] = rate
        out["burst"] = burst if burst is not None else max(1, min(CAP_BURST, math.floor(rate)))
    return out


def admission(lim, steps):
    present = []          # (send index, size) of delivered files still in the inbox
    index = 0
    out = []
    for step in steps:
        if "gone" in step:
            present = [p for p in present if p[0] not in step["gone"]]
            continue
        size = step["send"]
        answer = step.get("answer", False)
        n, b = len(present), sum(s for _, s in present)
        if answer:
            verdict = "ok"
        elif n + 1 > lim["pending"]:
            verdict = "pending"
        elif n > 0 and b + size > lim["pendingBytes"]:
            verdict = "pendingBytes"
        else:
            verdict = "ok"
        out.append(verdict)
        if verdict == "ok":
            present.append((index, size))
            index += 1
    return out


def bucket(rate, burst, times):
    tokens, last, out = float(burst), None, []
    for t in times:
        if last is None:
            last = t
        elif t > last:
            tokens = min(float(burst), tokens + (t - last) * rate / 1000.0)
            last = t
        if tokens >= 1.0:
            tokens -= 1.0
            out.append(0)
        else:
            out.append(math.ceil((1.0 - tokens) * 1000.0 / rate))
    return out


# ------------------------------------------------------------------ the cases
def entry(quota_text, features='["quota"]'):
    return ('{"name":"r","id":"6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9","lastHeartbeat":1700000000.0,'
            f'"features":{features}' + (f',"quota":{quota_text}' if quota_text is not None else "") + "}")


LIMITS = [
    ("basic", entry('{"pending":64,"pendingBytes":4194304}'), "s"),
    ("not_advertised", entry('{"pending":64,"pendingBytes":4194304}', features='["chunks"]'), "s"),
    ("no_features", entry('{"pending":64,"pendingBytes":4194304}', features="[]"), "s"),
    ("advertised_without_field", entry(None), "s"),
    ("field_not_object", entry('[64,4194304]'), "s"),
    ("missing_pending_bytes", entry('{"pending":64}'), "s"),
    ("missing_pending", entry('{"pendingBytes":4194304}'), "s"),
    ("integral_spellings", entry('{"pending":6.4e1,"pendingBytes":4194304.0}'), "s"),
    ("boolean_is_invalid", entry('{"pending":true,"pendingBytes":4194304}'), "s"),
    ("string_is_invalid", entry('{"pending":"64","pendingBytes":4194304}'), "s"),
    ("zero_is_invalid", entry('{"pending":0,"pendingBytes":4194304}'), "s"),
    ("negative_is_invalid", entry('{"pending":64,"pendingBytes":-1}'), "s"),
    ("fraction_is_invalid", entry('{"pending":1.5,"pendingBytes":4194304}'), "s"),
    ("clamped", entry('{"pending":100000,"pendingBytes":1e300,"rate":1e9,"burst":1000000}'), "s"),
    ("integer_beyond_a_double_is_missing", entry('{"pending":8,"pendingBytes":1' + "0" * 400 + '}'), "s"),
    ("rate_beyond_a_double_is_missing", entry('{"pending":8,"pendingBytes":65536,"rate":1' + "0" * 400 + '}'), "s"),
    ("exponent_beyond_a_double_is_missing", entry('{"pending":8,"pendingBytes":1e400}'), "s"),
    ("rate_default_burst", entry('{"pending":8,"pendingBytes":65536,"rate":200}'), "s"),
    ("slow_rate_burst_one", entry('{"pending":8,"pendingBytes":65536,"rate":0.25}'), "s"),
    ("fractional_rate", entry('{"pending":8,"pendingBytes":65536,"rate":12.75}'), "s"),
    ("rate_with_burst", entry('{"pending":8,"pendingBytes":65536,"rate":100,"burst":10}'), "s"),
    ("burst_without_rate", entry('{"pending":8,"pendingBytes":65536,"burst":10}'), "s"),
    ("invalid_rates", entry('{"pending":8,"pendingBytes":65536,"rate":0,"burst":3}'), "s"),
    ("string_rate", entry('{"pending":8,"pendingBytes":65536,"rate":"fast"}'), "s"),
    ("override", entry('{"pending":64,"pendingBytes":4194304,"senders":{"bulk":{"pending":256,'
                       '"pendingBytes":16777216}}}'), "bulk"),
    ("override_for_another", entry('{"pending":64,"pendingBytes":4194304,"senders":{"bulk":{"pending":256}}}'),
     "s"),
    ("override_invalid_fields_ignored", entry('{"pending":64,"pendingBytes":4194304,"senders":{"s":'
                                              '{"pending":0,"pendingBytes":false,"rate":-1}}}'), "s"),
    ("override_rate_keeps_base_burst", entry('{"pending":64,"pendingBytes":4194304,"burst":5,'
                                             '"senders":{"s":{"rate":50}}}'), "s"),
    ("override_burst_only", entry('{"pending":64,"pendingBytes":4194304,"rate":20,"senders":{"s":{"burst":2}}}'),
     "s"),
    ("override_not_object", entry('{"pending":64,"pendingBytes":4194304,"senders":{"s":7}}'), "s"),
    ("senders_not_object", entry('{"pending":64,"pendingBytes":4194304,"senders":["s"]}'), "s"),
    ("unknown_fields_ignored", entry('{"pending":3,"pendingBytes":300,"version":9,"watermarks":{}}'), "s"),
]

ADMISSION = [
    ("count_limit", {"pending": 3, "pendingBytes": 1000000},
     [{"send": 100}, {"send": 100}, {"send": 100}, {"send": 100}, {"gone": [0]}, {"send": 100}, {"send": 100}]),
    ("bytes_limit", {"pending": 100, "pendingBytes": 1000},
     [{"send": 400}, {"send": 400}, {"send": 300}, {"send": 200}, {"gone": [1]}, {"send": 300}, {"send": 200}]),
    ("one_envelope_always_fits", {"pending": 4, "pendingBytes": 100},
     [{"send": 5000}, {"send": 10}, {"gone": [0]}, {"send": 10}, {"send": 90}, {"send": 1}]),
    ("out_of_order_consumption", {"pending": 2, "pendingBytes": 1000000},
     [{"send": 92}, {"send": 92}, {"send": 92}, {"gone": [1]}, {"send": 92}, {"send": 92}, {"gone": [0, 2]},
      {"send": 92}, {"send": 92}]),
    ("answers_never_wait_but_count", {"pending": 2, "pendingBytes": 1000000},
     [{"send": 92, "answer": True}, {"send": 92, "answer": True}, {"send": 92, "answer": True}, {"send": 92},
      {"gone": [0, 1]}, {"send": 92}, {"gone": [2]}, {"send": 92}]),
    ("pending_checked_before_bytes", {"pending": 1, "pendingBytes": 10},
     [{"send": 50}, {"send": 50}]),
]

BUCKETS = [
    ("burst_then_paced", 10.0, 3, [0, 0, 0, 0, 50, 100, 100, 250, 1000]),
    ("fractional_rate", 2.5, 1, [0, 100, 399, 400, 1199, 1200, 5000, 5000]),
    ("refill_caps_at_burst", 1000.0, 2, [0, 0, 0, 10000, 10000, 10000, 10001]),
    ("time_never_goes_back", 4.0, 1, [1000, 900, 1200, 1250]),
]


def main() -> int:
    out = {
        "comment": "quota extension: see docs/PROTOCOL.md (Extensions, quota). Generated by "
                   "tests/vectors/generate_quota_vectors.py.",
        "limits": [{"name": n, "entry": e, "sender": s, "expect": limits(e, s)} for n, e, s in LIMITS],
        "admission": [{"name": n, "limits": lim, "steps": steps, "expect": admission(lim, steps)}
                      for n, lim, steps in ADMISSION],
        "bucket": [{"name": n, "rate": r, "burst": b, "times_ms": t, "expect_delay_ms": bucket(r, b, t)}
                   for n, r, b, t in BUCKETS],
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
