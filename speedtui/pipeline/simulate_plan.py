"""The simulator's plan of an environment over the whole time line (simulate.py): node names, the
services each offers, the weighted pairs that talk, and every node's lease records — restarts,
crashes, lost leases — with the spans in which it is offline. Drawn once from the seed, then
shared by every slice."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

BASE_NAMES = ["gateway", "billing", "reports", "inventory", "auth", "orders", "search", "payments",
              "ledger", "notify", "catalog", "shipping", "analytics", "audit", "pricing", "users"]
DEMO = ("echo", "calculateTax", "sleep", "fail")
CUSTOM = ("lookup", "quote", "reserve", "charge", "render", "index", "verify", "publish")
LEASE_SECONDS = 30.0


def node_names(n: int) -> list[str]:
    if n <= len(BASE_NAMES):
        return BASE_NAMES[:n]
    return BASE_NAMES + [f"worker-{i:03d}" for i in range(1, n - len(BASE_NAMES) + 1)]


@dataclass
class Plan:
    names: list[str]
    start: float
    end: float
    services: dict[str, list[str]]
    pairs: list[tuple[int, int]]          # weighted (expanded) list of (src, dst) indices
    lease: list[tuple[float, str, str]]   # (ts, writer, line) sorted
    offline: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    no_kind: set = field(default_factory=set)


def plan_leases(names: list[str], seed: int, start: float, end: float) -> Plan:
    rng = random.Random(f"plan-{seed}")
    n = len(names)
    services = {}
    for name in names:
        k = rng.randint(1, 3)
        services[name] = list(DEMO[:rng.randint(2, 4)]) + rng.sample(CUSTOM, k)
    # talker pairs with a heavy tail: a few hot links
    pairs: list[tuple[int, int]] = []
    if n >= 2:
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                w = rng.paretovariate(1.2)
                pairs.extend([(i, j)] * max(1, min(200, int(w * 3))))
    rng.shuffle(pairs)
    no_kind = {nm for nm in names if rng.random() < 0.25}   # older writers omit "kind"

    # ---- lifecycle: sessions, crashes, graceful restarts, lost leases
    duration = end - start
    lease: list[tuple[float, str, str]] = []
    offline: dict[str, list[tuple[float, float]]] = {nm: [] for nm in names}
    incidents: list[tuple[float, str, str]] = []   # (t, node, kind)
    for nm in names:
        t = start + rng.uniform(0, min(5.0, duration * 0.01))
        incidents.append((t, nm, "boot"))
        n_inc = rng.choices([0, 1, 2, 3], weights=[50, 30, 15, 5])[0] if duration > 600 else 0
        for _ in range(n_inc):
            incidents.append((start + rng.uniform(0.05, 0.9) * duration, nm,
                              rng.choices(["crash", "restart", "lost"], weights=[50, 40, 10])[0]))
        if duration > 600 and rng.random() < 0.1:
            incidents.append((end - rng.uniform(60, 300), nm, "shutdown"))
    incidents.sort()

    def rec(ts, writer, subject, event):
        lease.append((ts, writer, '{"kind":"lease","ts":%.6f,"node":"%s","subject":"%s","event":"%s"}\n'
                      % (ts, writer, subject, event)))

    down_until: dict[str, float] = {}
    last_down: dict[str, float] = {}

    def online(nm, t):
        return all(not (a <= t < b) for a, b in offline[nm])

    def observers(subject, t):
        return [o for o in names if o != subject and online(o, t) and o in down_until]

    for t, nm, kind in incidents:
        if kind != "boot" and (nm not in down_until or t < down_until.get(nm, 0) + 60
                               or t < last_down.get(nm, -1e18) + 120):
            continue  # not up yet, or too close to the previous incident
        if kind == "boot":
            rec(t, nm, nm, "registered")
            for o in observers(nm, t):
                rec(t + rng.uniform(0.01, 1.5), o, nm, "observed_join")
            down_until[nm] = t
            continue
        if kind == "shutdown":
            rec(t, nm, nm, "deregistered")
            for o in observers(nm, t):
                rec(t + rng.uniform(0.01, 1.0), o, nm, "observed_leave")
            offline[nm].append((t, math.inf))
            down_until[nm] = math.inf
            continue
        if rng.random() < 0.5:
            rec(t - rng.uniform(1, 20), nm, nm, "renewed_late")
        if kind == "restart":
            back = t + rng.uniform(2, 30)
            rec(t, nm, nm, "deregistered")
            for o in observers(nm, t):
                rec(t + rng.uniform(0.01, 1.0), o, nm, "observed_leave")
            offline[nm].append((t, back))
            rec(back, nm, nm, "registered")
            for o in observers(nm, back):
                rec(back + rng.uniform(0.01, 1.5), o, nm, "observed_join")
        elif kind == "crash":
            seen = t + LEASE_SECONDS + rng.uniform(0.5, 5)
            back = seen + rng.uniform(1, 120)
            obs = observers(nm, seen)
            for o in obs:
                rec(seen + rng.uniform(0, 2), o, nm, "observed_expiry")
            offline[nm].append((t, back))
            rec(back, nm, nm, "reclaimed")
            for o in observers(nm, back):
                rec(back + rng.uniform(0.01, 1.5), o, nm, "observed_join")
        else:  # lost: paused past its lease, reaped by a peer, then finds its entry gone
            seen = t + LEASE_SECONDS + rng.uniform(0.5, 5)
            obs = observers(nm, seen)
            for o in obs:
                rec(seen + rng.uniform(0, 2), o, nm, "observed_expiry")
            if obs:
                rec(seen + 2.5, obs[0], nm, "reaped")
            resume = seen + rng.uniform(5, 60)
            rec(resume, nm, nm, "lost")
            back = resume + rng.uniform(1, 10)
            offline[nm].append((t, back))
            rec(back, nm, nm, "registered")
            for o in observers(nm, back):
                rec(back + rng.uniform(0.01, 1.5), o, nm, "observed_join")
        down_until[nm] = max(b for _, b in offline[nm])
        last_down[nm] = t
    lease = [x for x in lease if start <= x[0] < end]
    lease.sort()
    return Plan(names, start, end, services, pairs, lease, offline, no_kind)
