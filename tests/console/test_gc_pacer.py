"""The garbage-collector pacer: when it collects (pure policy) and what it does to the real
collector (thresholds taken over and given back, survivors frozen)."""

import gc

from speedtui.ui.gc_pacer import CollectorPacer, PacerPolicy


def test_policy_waits_for_a_quiet_moment():
    p = PacerPolicy(every=10, idle_after=0.5, at_most=60)
    assert not p.due(now=5, last_full=0, last_input=-100)  # too soon
    assert p.due(now=10, last_full=0, last_input=9.4)  # due and the operator is idle
    assert not p.due(now=10, last_full=0, last_input=9.8)  # a key a moment ago: wait
    assert not p.due(now=59, last_full=0, last_input=58.9)  # keys all the time: still waiting
    assert p.due(now=60, last_full=0, last_input=59.99)  # but never longer than at_most


class Steps:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_pacer_takes_full_collections_over_and_gives_them_back():
    before = gc.get_threshold()
    clock = Steps()
    pacer = CollectorPacer(PacerPolicy(every=10, idle_after=0.5, at_most=60), clock=clock)
    try:
        pacer.start()
        assert gc.get_threshold()[:2] == before[:2]
        assert gc.get_threshold()[2] > 10**6  # no automatic full collection
        assert gc.get_freeze_count() > 0  # what survived start-up is out of the walk
        assert pacer.full_collections == 1
        clock.now = 5
        assert not pacer.tick()
        clock.now = 10.2
        pacer.input_seen()
        assert not pacer.tick()  # a key was just pressed
        clock.now = 11
        assert pacer.tick()
        assert pacer.full_collections == 2 and pacer.last_pause_ms >= 0
    finally:
        pacer.stop()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cycles_that_die_while_frozen_are_reclaimed_by_the_next_full_collection():
    import weakref

    class Node:
        pass

    clock = Steps()
    pacer = CollectorPacer(PacerPolicy(every=1, idle_after=0, at_most=5), clock=clock)
    a, b = Node(), Node()
    a.peer, b.peer = b, a  # a cycle: only the cyclic collector frees it
    probe = weakref.ref(a)
    try:
        pacer.start()  # the cycle is alive, so it is frozen
        del a, b
        gc.collect()
        assert probe() is not None  # frozen objects are not walked
        clock.now = 2
        assert pacer.tick()
        assert probe() is None
    finally:
        pacer.stop()
