"""The pure core of the runtime: bytes, names, facts and times in; values or the runtime's own
errors out. Nothing here starts a thread, reads a clock, sleeps or touches a path (a test imports
it in a fresh interpreter and checks), so every rule of the contract is tested without a file
system.

    errors     the error hierarchy (local vs remote)        names      node names (§2)
    keys       the key and its text form (§3)                entry      registry entries (§4)
    liveness   the one liveness verdict (§4.1)              envelope   header, seal, open, file names (§5)
    payloads   JSON payloads per type (§5.2)                 replay     replay window, bounded gaps (§5.5.5)
    receiving  the receiver's judgement (§5.5 steps 1–5)     access     grants, policies, the explainer
    services   services and the callee's checks (§5.6)      records    trace events and journal lines (§8)
    message    what an application receives                  control    operator keys, signed requests (§9 `control`)
    visible    members' strings made fit to show: control characters written out (principle (f))
"""
