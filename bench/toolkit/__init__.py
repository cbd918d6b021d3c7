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
``front_load``
    a front's cost without a broker or JVM: a stand-in broker, a floor relay, the frames and
    loads sent from threads, CPU ratios paired round by round.
``trogdor``
    Kafka's own load tool run as a process, and the counters read around a round.
``sidebyside``
    a Kafka and an acceptor under the same limits, for the benches that compare them.

The benches themselves (``bench.acceptor``, ``bench.front_cost``, ``bench.accept_floor``, ...)
import from here, never from each other's modules.
"""
