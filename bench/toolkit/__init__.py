"""What the benches share, apart from any one bench: each module one concern.

``fronts``
    an acceptor as its own process (the current tree's or another commit's), its readiness
    and its counters, stopped for sure; the sessions the fronts run in (the scheduler's
    autogroup).
``netns``
    the kernel's TCP counters of a network namespace, and a bench re-run in a private one
    (loopback only) so they count that bench's traffic alone.
``profiling``
    py-spy and perf around a block, py-spy's collapsed stacks as self and inclusive shares.
``load``
    the order paths are visited in, round by round, and a producer's throughput.

The benches themselves (``bench.acceptor``, ``bench.front_cost``, ``bench.accept_floor``, ...)
import from here, never from each other's modules.
"""
