"""The split model's accepting side of a request-quota charge (`split.ProcessorProcess`):
a claim is answered with whether the charge could throttle, over the windows one process
judges it over (the seeded fault `late_charge_n_windows`: n), a late charge is recorded
without a check, a charge with its check answers its throttle. No processor process is
started: the messages are handed to the accepting side and its answers read off its link.

The quota: client-id `test` at 1 % of a thread, 11 samples of 1 s. The shortest window
`Rate` measures is 10 s, so on an empty bucket a charge could throttle only if over 100 ms
(110 ms over the fault's 11 windows).
"""

from __future__ import annotations

from typing import Any

import pytest

from acceptor import messages as msg
from acceptor.config import parse_acceptor_config
from acceptor.ports import ASK_CHECK, ASK_CLAIM, ASK_LATE
from acceptor.split import Owned, SplitProcessors
from base.quota.faults import FAULT_KEY
from base.quota.requests import RequestQuotas

pytestmark = pytest.mark.unit

MS = 1_000_000
PROPS = {
    "listeners": "CLIENT://127.0.0.1:0",
    "listener.name.client.upstream": "127.0.0.1:9092",
    "acceptor.process.model": "split",
}


class Link:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, ops: list[Any], *_: Any) -> None:
        self.sent.extend(ops)


def accepting(fault: str = "") -> tuple[Any, RequestQuotas, Link]:
    """The accepting side of one processor process, over real meters."""
    props = {**PROPS, **({FAULT_KEY: fault} if fault else {})}
    cfg = parse_acceptor_config(props)
    meters = RequestQuotas(11, 1, faults=cfg.faults)
    meters.set_quota(None, "test", "request_percentage", 1.0)
    owned = Owned(None, meters, None, None, lambda: None, lambda _: None)  # type: ignore[arg-type]
    split = SplitProcessors.__new__(SplitProcessors)  # no shared memory, no processes
    split.cfg, split.owned = cfg, owned
    split.claim_windows = cfg.faults.policy().claim_windows(meters.claim_windows)
    child = split_child(split)
    link = Link()
    child.link = link
    return child, meters, link


def split_child(split: SplitProcessors) -> Any:
    from acceptor.split import ProcessorProcess

    child = ProcessorProcess.__new__(ProcessorProcess)
    child.owner = split
    return child


def ask(kind: str, charged_ms: float, now_ms: int = 1_000, cid: int = 1) -> msg.Charge:
    ns = int(charged_ms * MS)
    return msg.Charge("c-1", cid, "test", 0, ns, 0, now_ms, "ANONYMOUS", kind)


@pytest.mark.parametrize(("charged_ms", "hold"), [(100.0, False), (101.0, True)])
def test_a_claim_is_judged_over_n_minus_1_windows(charged_ms: float, hold: bool) -> None:
    child, _, link = accepting()
    child._charge(ask(ASK_CLAIM, charged_ms))
    child._charge(ask(ASK_CLAIM, charged_ms, cid=2))  # the first one recorded nothing
    assert link.sent == [msg.Claimed("c-1", 1, hold), msg.Claimed("c-1", 2, hold)]


def test_the_seeded_fault_judges_a_claim_over_n_windows() -> None:
    child, _, link = accepting("late_charge_n_windows")
    child._charge(ask(ASK_CLAIM, 105.0))  # over 10 s it could throttle; over 11 s not
    assert link.sent == [msg.Claimed("c-1", 1, False)]


def test_a_late_charge_is_recorded_without_a_check_and_answered_by_nothing() -> None:
    child, _, link = accepting()
    child._charge(ask(ASK_LATE, 300.0))
    assert link.sent == []
    # the bucket holds it: a claim of the least charge now could throttle
    child._charge(ask(ASK_CLAIM, 0.001, now_ms=1_001, cid=2))
    assert link.sent == [msg.Claimed("c-1", 2, True)]


def test_a_checked_charge_answers_its_throttle() -> None:
    child, _, link = accepting()
    child._charge(ask(ASK_CHECK, 300.0))
    (charged,) = link.sent
    assert isinstance(charged, msg.Charged) and charged.throttle_ms > 0


def test_the_kinds_travel_the_link_encoding() -> None:
    for kind in (ASK_CHECK, ASK_CLAIM, ASK_LATE):
        op = ask(kind, 1.0)
        assert msg.decode(msg.encode(op)) == op
    claimed = msg.Claimed("c-1", 7, True)
    assert msg.decode(msg.encode(claimed)) == claimed
