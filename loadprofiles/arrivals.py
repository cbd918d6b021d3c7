"""Open-model arrival schedules: when each new connection *should* start.

The schedule is computed from the spec alone (plus a seed), never from how fast the
target answers, so a throttling target cannot quietly lower the offered load: the
driver compares what it managed to start against this list and records the gap.

Shapes are given as a rate function ``rate(t)`` (arrivals/s at ``t`` seconds from
the start). Deterministic shapes place arrival ``k`` where the integrated rate first
reaches ``k + 1`` (sub-millisecond resolution); ``poisson`` draws exponential gaps
from ``random.Random(seed)``. Everything here is pure: no clock, no sockets.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

#: integration step for the deterministic shapes (seconds); arrival times are
#: interpolated inside a step, so this bounds the error of piecewise-linear rates only
STEP_S = 0.001

SHAPES = ("constant", "step", "spike", "ramp", "poisson", "sawtooth")

_EXAMPLES = {
    "constant": "constant:rate=50",
    "step": "step:rates=10/50/100,every=5",
    "spike": "spike:base=5,peak=200,at=10,for=2",
    "ramp": "ramp:from=0,to=200,over=30",
    "poisson": "poisson:rate=50",
    "sawtooth": "sawtooth:low=0,high=100,period=10",
}

# shape -> (required keys, optional keys with defaults)
_KEYS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "constant": (("rate",), {}),
    "step": (("rates", "every"), {}),
    "spike": (("base", "peak", "at", "for"), {}),
    "ramp": (("from", "to", "over"), {}),
    "poisson": (("rate",), {}),
    "sawtooth": (("low", "high", "period"), {}),
}


class ArrivalSpecError(ValueError):
    """A bad ``--arrival`` spec; the message names the key, the value and the reason."""

    def __init__(self, key: str, value: str, reason: str) -> None:
        super().__init__(f"--arrival: {key}={value!r}: {reason}")
        self.key, self.value, self.reason = key, value, reason


@dataclass(frozen=True)
class ArrivalSpec:
    """A parsed ``--arrival`` value: the shape and its numeric parameters."""

    shape: str
    params: dict[str, float] = field(default_factory=dict)
    rates: tuple[float, ...] = ()  # only for ``step``
    text: str = ""

    def rate(self, t: float) -> float:
        """Intended arrivals per second at ``t`` seconds after the start."""
        return _rate_function(self)(t)

    def expected_count(self, duration_s: float) -> float:
        """Integral of the rate over ``[0, duration_s)``: the intended arrivals."""
        if self.shape == "poisson":
            return self.params["rate"] * duration_s
        fn = _rate_function(self)
        n = max(1, math.ceil(duration_s / STEP_S))
        h = duration_s / n
        return sum(fn((i + 0.5) * h) for i in range(n)) * h


def _number(key: str, raw: str, *, positive: bool = False) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ArrivalSpecError(key, raw, "not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ArrivalSpecError(key, raw, "must be a finite number >= 0")
    if positive and value <= 0:
        raise ArrivalSpecError(key, raw, "must be > 0")
    return value


def parse_arrival(text: str) -> ArrivalSpec:
    """Parse ``shape:key=value,...`` (see ``_EXAMPLES``); raises ArrivalSpecError."""
    shape, _, rest = text.strip().partition(":")
    shape = shape.strip().lower()
    if shape not in _KEYS:
        raise ArrivalSpecError(
            "shape", shape, f"unknown shape; expected one of {', '.join(SHAPES)}"
        )
    required, optional = _KEYS[shape]
    raw: dict[str, str] = dict(optional)
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq:
            raise ArrivalSpecError(key, "", f"expected key=value, e.g. {_EXAMPLES[shape]}")
        if key not in required and key not in optional:
            raise ArrivalSpecError(
                key, value, f"unknown key for {shape}; expected {', '.join(required)}"
            )
        raw[key] = value.strip()
    missing = [k for k in required if k not in raw]
    if missing:
        raise ArrivalSpecError(
            missing[0],
            "",
            f"missing; {shape} needs {', '.join(required)} (e.g. {_EXAMPLES[shape]})",
        )
    params: dict[str, float] = {}
    rates: tuple[float, ...] = ()
    for key, value in raw.items():
        if key == "rates":
            parts = [p for p in value.split("/") if p.strip()]
            if not parts:
                raise ArrivalSpecError(key, value, "expected rates separated by '/'")
            rates = tuple(_number(key, p) for p in parts)
        else:
            positive = key in ("every", "period", "over", "for") or (
                shape == "poisson" and key == "rate"
            )
            params[key] = _number(key, value, positive=positive)
    if shape == "sawtooth" and params["high"] < params["low"]:
        raise ArrivalSpecError("high", raw["high"], "must be >= low")
    return ArrivalSpec(shape=shape, params=params, rates=rates, text=text.strip())


def _rate_function(spec: ArrivalSpec) -> Callable[[float], float]:
    p = spec.params
    if spec.shape in ("constant", "poisson"):
        rate = p["rate"]
        return lambda t: rate
    if spec.shape == "step":
        rates, every = spec.rates, p["every"]
        return lambda t: rates[min(int(t // every), len(rates) - 1)]
    if spec.shape == "spike":
        base, peak, at, length = p["base"], p["peak"], p["at"], p["for"]
        return lambda t: peak if at <= t < at + length else base
    if spec.shape == "ramp":
        lo, hi, over = p["from"], p["to"], p["over"]
        return lambda t: hi if t >= over else lo + (hi - lo) * t / over
    if spec.shape == "sawtooth":
        lo, hi, period = p["low"], p["high"], p["period"]
        return lambda t: lo + (hi - lo) * ((t % period) / period)
    raise AssertionError(spec.shape)  # parse_arrival admits only known shapes


def arrival_times(
    spec: ArrivalSpec,
    *,
    seed: int = 0,
    duration_s: float | None = None,
    max_arrivals: int | None = None,
) -> Iterator[float]:
    """Intended arrival offsets in seconds from the start, ascending.

    Unbounded unless ``duration_s`` (arrivals strictly before it) or ``max_arrivals``
    ends it; a rate that is 0 forever simply yields nothing more (callers bound time).
    """
    count = 0
    if max_arrivals is not None and max_arrivals <= 0:
        return
    if spec.shape == "poisson":
        rng = random.Random(seed)
        rate, t = spec.params["rate"], 0.0
        while True:
            t += rng.expovariate(rate)
            if duration_s is not None and t >= duration_s:
                return
            yield t
            count += 1
            if max_arrivals is not None and count >= max_arrivals:
                return
    fn = _rate_function(spec)
    acc, step = 0.0, 0  # acc = integrated rate up to the step; arrival k when acc reaches k
    while True:
        t = step * STEP_S
        if duration_s is not None and t >= duration_s:
            return
        rate = fn(t + STEP_S / 2)  # midpoint: exact for the linear pieces (ramp, sawtooth)
        if rate <= 0 and _never_rises_again(spec, t):
            return
        gained = rate * STEP_S
        while acc + gained >= count:
            at = round(t + max(0.0, count - acc) / rate, 9)  # ns: no float drift at edges
            if duration_s is not None and at >= duration_s:
                return
            yield at
            count += 1
            if max_arrivals is not None and count >= max_arrivals:
                return
        acc += gained
        step += 1


def _never_rises_again(spec: ArrivalSpec, t: float) -> bool:
    """True when the rate is zero now and stays zero, so the schedule is over."""
    p = spec.params
    if spec.shape == "constant":
        return p["rate"] == 0
    if spec.shape == "step":
        every = p["every"]
        return all(r == 0 for r in spec.rates[min(int(t // every), len(spec.rates) - 1) :])
    if spec.shape == "spike":
        return p["base"] == 0 and (p["peak"] == 0 or t >= p["at"] + p["for"])
    if spec.shape == "ramp":
        return p["to"] == 0 and (p["from"] == 0 or t >= p["over"])
    if spec.shape == "sawtooth":
        return p["high"] == 0
    return False


def split(times: Iterator[float], slot: int, slots: int) -> Iterator[tuple[int, float]]:
    """The arrivals one of ``slots`` drivers owns: global index ``k`` with ``k % slots == slot``.

    Every driver computes the same global schedule (same spec, seed, bounds), so the
    drivers of a ``--processes``/master-worker run interleave without coordinating.
    """
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot} outside 0..{slots - 1}")
    for k, t in enumerate(times):
        if k % slots == slot:
            yield k, t
