"""The adaptive A/B's schedule (tools/abtest.AB.run): which arm is measured when, how many windows
each look has, and when it stops. The lab is replaced by scripted windows (`_segment` is
overridden, the context is a stub): this checks the schedule only. The same code on a real lab
runs in tests/test_loop_vlab.py and bench/loop_throughput.py, where whether a second look
happens depends on the lab's noise -- so the adding of windows is pinned here."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from labwarden.core.decision import DecisionRule
from labwarden.core.experiments import Arm
from labwarden.tools.abtest import AB

pytestmark = pytest.mark.anyio

RULE = DecisionRule(alpha=0.02, beta=0.1, min_effect_pct=5.0, min_windows=3, step_windows=2,
                    max_windows=11)


class Scripted(AB):
    """AB whose windows come from per-arm iterators; records each segment as (arm, windows)."""

    def __init__(self, values: dict[str, itertools.cycle[float]], on: str | None = None,
                 interleave: bool = True) -> None:
        board = SimpleNamespace(fingerprint_ok=lambda: on is not None, verified_build=on)
        ctx = SimpleNamespace(profile=SimpleNamespace(decision=SimpleNamespace(
            offered_load_counter=None)), peek_state=lambda: board)
        super().__init__(ctx, "img-a", "img-b", stations=114, rule=RULE, window_s=4.0,  # type: ignore[arg-type]
                         interleave=interleave)
        self.values = values
        self.segments: list[tuple[str, int]] = []

    async def _segment(self, name: str, arm: Arm, k: int) -> None:
        self.segments.append((name, k))
        arm.values += [next(self.values[name]) for _ in range(k)]


async def test_unknown_adds_step_windows_alternating_until_the_cap() -> None:
    """Noise far wider than the band: every look is unknown, so each round adds step_windows per
    arm, starting on the arm the last round ended on (A B, B A, ...: one flash a round), and the
    cap's look is the last one -- it stays unknown."""
    ab = Scripted({"a": itertools.cycle([30.0, 40.0, 20.0]), "b": itertools.cycle([25.0, 38.0, 29.0])})
    s = await ab.run()
    assert [(j.n_a, j.n_b, j.verdict) for j in s.looks] == [(n, n, "unknown") for n in RULE.looks()]
    assert s.looks[-1].decided and not any(j.decided for j in s.looks[:-1])
    assert ab.segments == [("a", 3), ("b", 3), ("b", 2), ("a", 2), ("a", 2), ("b", 2),
                           ("b", 2), ("a", 2), ("a", 2), ("b", 2)]


@pytest.mark.parametrize(("b", "verdict", "looks"), [
    ([20.0, 20.2, 19.9], "improved", [3]),                            # decided at the first look
    ([30.1, 29.9, 30.0, 30.2, 29.8], "same", [3, 5]),                 # one round of adding
])
async def test_the_schedule_stops_at_the_first_decided_look(b: list[float], verdict: str,
                                                             looks: list[int]) -> None:
    # A's scatter leaves the first look of the no-op undecided: an interval too wide for "same"
    a = itertools.cycle([30.0, 31.2, 28.9, 30.0, 30.1])
    ab = Scripted({"a": a, "b": itertools.cycle(b)})
    s = await ab.run()
    assert [j.n_a for j in s.looks] == looks and s.final.verdict == verdict, \
        [j.describe() for j in s.looks]


async def test_it_starts_on_the_image_that_runs() -> None:
    """B is the verified image on the DUT: the first round measures B first (no flash)."""
    ab = Scripted({"a": itertools.cycle([30.0, 40.0, 20.0]), "b": itertools.cycle([25.0, 38.0, 29.0])},
                  on="img-b")
    await ab.run()
    assert ab.segments[:4] == [("b", 3), ("a", 3), ("a", 2), ("b", 2)]


async def test_without_interleaving_a_is_measured_once_at_the_cap() -> None:
    """A flash that costs a reboot: A once, at max_windows, then B adds windows against it (two
    flashes in all); the cap is B's. An A of min_windows would leave the interval a few degrees of
    freedom -- a quiet no-op could never be "same"."""
    ab = Scripted({"a": itertools.cycle([30.0, 40.0, 20.0]), "b": itertools.cycle([25.0, 38.0, 29.0])},
                  interleave=False)
    s = await ab.run()
    assert ab.segments == [("a", RULE.max_windows), ("b", 3), ("b", 2), ("b", 2), ("b", 2), ("b", 2)]
    assert [(j.n_a, j.n_b) for j in s.looks] == [(RULE.max_windows, n) for n in RULE.looks()]
    assert s.looks[-1].decided and not any(j.decided for j in s.looks[:-1])
    quiet = Scripted({"a": itertools.cycle([30.0, 30.3, 29.8]), "b": itertools.cycle([30.1, 29.9, 30.2])},
                     interleave=False)
    assert (await quiet.run()).final.verdict == "same" and quiet.segments == [("a", 11), ("b", 3)]
