"""The adaptive A/B's schedule (tools/abtest.AB.run): which arm is measured when, how many windows
each look has, and when it stops. The lab is replaced by scripted windows (`_segment` is
overridden, the context is a stub): this checks the schedule only. The same code on a real lab
runs in tests/test_loop_vlab.py and bench/loop_throughput.py, where whether a second look
happens depends on the lab's noise -- so the adding of windows is pinned here."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from labwarden.core.decision import DecisionRule, judge
from labwarden.core.experiments import Arm, WindowEnv
from labwarden.lab.config import DecisionSection
from labwarden.tools.abtest import AB

pytestmark = pytest.mark.anyio

RULE = DecisionRule(alpha=0.02, beta=0.1, min_effect_pct=5.0, min_windows=3, step_windows=2,
                    max_windows=11, round_windows="look")
"""A look's windows per round (the default, said here so the schedule stays pinned): pairs and
"auto" have their own tests."""


class Scripted(AB):
    """AB whose windows come from per-arm iterators; records each segment as (arm, windows)."""

    def __init__(self, values: dict[str, itertools.cycle[float]], on: str | None = None,
                 interleave: bool | str = True, switch_s: float | None = None,
                 others: dict[str, itertools.cycle[float]] | None = None,
                 shift_pp: float | None = None, drift_check: bool = False,
                 reuse_a: Arm | None = None, measured: float | None = None,
                 waits: dict[str, itertools.cycle[float]] | None = None,
                 rule: DecisionRule = RULE, others_action: str = "drop",
                 flashes_per_hour: int | None = None) -> None:
        board = SimpleNamespace(fingerprint_ok=lambda: board.verified_build is not None,
                                verified_build=on, switch_s=switch_s)
        self.board, self.measured = board, measured
        ctx = SimpleNamespace(profile=SimpleNamespace(decision=SimpleNamespace(
            offered_load_counter=None, settle_s=0.0, environment_shift_pp=shift_pp,
            environment_action="drop" if shift_pp else "off", drift_check=drift_check,
            environment_wait_pp=10.0, environment_others_action=others_action),
            policy=SimpleNamespace(budgets=SimpleNamespace(flashes_per_hour=flashes_per_hour))),
            peek_state=lambda: board)
        super().__init__(ctx, "img-a", "img-b", stations=114, rule=rule, window_s=4.0,  # type: ignore[arg-type]
                         interleave=interleave,  # type: ignore[arg-type]
                         reuse_a=reuse_a, reuse_from="exp-earlier" if reuse_a else None)
        self.values = values
        self.others, self.waits = others, waits
        self.segments: list[tuple[str, int]] = []

    async def _measure_a_switch(self) -> None:
        """The lab's switch as the real one makes it (to B when the board runs A), its cost
        `measured` instead of timed."""
        if self.interleave == "auto" and self.board.switch_s is None:
            to = "b" if self.board.verified_build == "img-a" else "a"
            self.segments.append(("switch", to))  # type: ignore[arg-type]
            self.board.verified_build, self.board.switch_s = f"img-{to}", self.measured

    async def _segment(self, name: str, arm: Arm, k: int) -> None:
        self.segments.append((name, k))
        arm.values += [next(self.values[name]) for _ in range(k)]
        if self.others is not None:  # what a window's kernel split says ran beside it
            arm.env += [WindowEnv(others_pct=next(self.others[name]),
                                  wait_pct=next(self.waits[name]) if self.waits else None)
                        for _ in range(k)]


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


async def test_pairs_take_one_window_per_arm_a_round() -> None:
    """`round_windows = 1`: every round is one window of each arm (A B, B A, ...: one switch a
    round), each window tagged with its own round, and the looks stay the rule's (3, 5, ...
    kept windows per arm); the blocked analysis then reads the pairs' differences."""
    rule = RULE.model_copy(update={"round_windows": 1})
    ab = Scripted({"a": itertools.cycle([30.0, 40.0, 20.0]), "b": itertools.cycle([25.0, 38.0, 29.0])},
                  rule=rule)
    s = await ab.run()
    assert [(j.n_a, j.n_b, j.verdict) for j in s.looks] == [(n, n, "unknown") for n in rule.looks()]
    assert ab.segments[:6] == [("a", 1), ("b", 1), ("b", 1), ("a", 1), ("a", 1), ("b", 1)]
    assert all(k == 1 for _, k in ab.segments) and len(ab.segments) == 2 * rule.max_windows
    assert s.a.rounds == s.b.rounds == list(range(rule.max_windows))
    switches = sum(x[0] != y[0] for x, y in itertools.pairwise(ab.segments))
    assert switches == rule.max_windows  # one per round: each starts where the last one ended


@pytest.mark.parametrize(("flashes_per_hour", "first_round"), [
    (None, [("a", 1), ("b", 1)]),   # no flash budget (a vlab): pairs
    (12, [("a", 1), ("b", 1)]),     # the hour holds one A/B at the cap (11 pairs + 1): pairs
    (11, [("a", 3), ("b", 3)]),     # it does not: a look's windows per round
])
async def test_auto_rounds_are_pairs_where_the_flash_budget_holds_them(
        flashes_per_hour: int | None, first_round: list[tuple[str, int]]) -> None:
    """`round_windows = "auto"` settles on the profile's flash budget, never on
    what is left of it this hour: the design is fixed before any window."""
    rule = RULE.model_copy(update={"round_windows": "auto"})
    ab = Scripted({"a": itertools.cycle([30.0, 40.0, 20.0]), "b": itertools.cycle([25.0, 38.0, 29.0])},
                  rule=rule, flashes_per_hour=flashes_per_hour)
    s = await ab.run()
    assert ab.segments[:2] == first_round
    assert ab.rule.round_windows == (1 if first_round[0][1] == 1 else "look")
    assert len(ab.segments) == (2 * rule.max_windows if first_round[0][1] == 1 else 2 * len(rule.looks()))
    assert s.final.n_a == rule.max_windows


async def test_a_left_out_pair_is_replaced_by_a_pair() -> None:
    """Pairs with the environment rule: a round whose A and B ran under different loads is left
    out whole, and one more pair replaces it before the look counts."""
    rule = RULE.model_copy(update={"round_windows": 1})
    ab = Scripted({"a": itertools.cycle([30.0, 30.3, 29.8]), "b": itertools.cycle([20.1, 19.9, 20.2])},
                  rule=rule, shift_pp=40.0,
                  others={"a": itertools.cycle([5.0, 5.0, 5.0, 5.0]),
                          "b": itertools.cycle([5.0, 90.0, 5.0, 5.0])},
                  waits={"a": itertools.cycle([0.0]), "b": itertools.cycle([0.0])})
    s = await ab.run()
    assert s.final.verdict == "improved" and (s.final.n_a, s.final.n_b) == (3, 3), s.final
    assert ab.segments == [("a", 1), ("b", 1), ("b", 1), ("a", 1), ("a", 1), ("b", 1),
                           ("b", 1), ("a", 1)]  # the 4th pair replaces the 2nd
    assert s.a.left_out == s.b.left_out == [1] and "round 2" in s.environment[0]


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


@pytest.mark.parametrize(("switch_s", "design"), [(1.2, "interleaved"), (40.0, "blocks")])
async def test_auto_interleaves_from_the_measured_cost_of_a_switch(switch_s: float,
                                                                   design: str) -> None:
    """`interleave = "auto"`: a switch of image (flash + verify) measured at 1.2 s is cheap
    against a round's 2 x 4 s windows, 40 s (a reboot) is not."""
    ab = Scripted({"a": itertools.cycle([30.0, 30.3, 29.8]), "b": itertools.cycle([30.1, 29.9])},
                  interleave="auto", switch_s=switch_s, on="img-a")
    s = await ab.run()
    assert s.design == design and s.switch_s == switch_s and s.design_why
    assert ab.segments[0] == ("a", 3 if design == "interleaved" else RULE.max_windows)


@pytest.mark.parametrize(("measured", "design", "first"), [
    (1.5, "interleaved", [("switch", "b"), ("b", 3), ("a", 3)]),    # B's round first: no flash more
    (40.0, "blocks", [("switch", "b"), ("a", RULE.max_windows), ("b", 3)]),
])
async def test_a_switch_never_measured_is_made_and_measured_first(
        measured: float, design: str, first: list[tuple[str, object]]) -> None:
    """A lab whose switch of image was never timed (the board runs A, verified by hand): the
    A/B switches to B first and the design rests on what that switch took -- never on a guess."""
    ab = Scripted({"a": itertools.cycle([30.0, 30.3, 29.8]), "b": itertools.cycle([30.1, 29.9])},
                  interleave="auto", on="img-a", measured=measured)
    s = await ab.run()
    assert s.design == design and s.switch_s == measured
    assert ab.segments[:3] == first


async def test_interleaved_rounds_are_analysed_blocked_so_drift_between_rounds_cancels() -> None:
    """No effect, but the lab's level moves by +-12% from round to round (A and B of a round
    share it). Blocked by round the verdict is not "different"; two independent samples would
    see the rounds' spread as noise only -- and the model's dof and design are on the look."""
    # round levels 30, 34, 27, 33, ...: each round's A and B windows at that level, +-0.3
    levels = [30.0, 34.0, 27.0, 33.0, 28.0]
    ab = Scripted({"a": itertools.cycle([30.0, 30.3, 29.8]), "b": itertools.cycle([30.1])})
    rounds, level = iter(levels), [0.0]

    async def segment(name: str, arm: Arm, k: int) -> None:
        ab.segments.append((name, k))
        if len(ab.segments) % 2:  # a round's first segment: the lab's level moves
            level[0] = next(rounds)
        sign = 1 if name == "a" else -1  # A and B scatter differently inside a round
        arm.values += [level[0] + sign * (0.5 if i % 2 else -0.5) for i in range(k)]

    ab._segment = segment  # type: ignore[method-assign]
    s = await ab.run()
    assert s.design == "interleaved" and s.final.design == "blocked"
    assert s.final.verdict == "same", [j.describe() for j in s.looks]
    assert len(s.looks) >= 2 and s.a.rounds[:5] == [0, 0, 0, 1, 1]
    independent = judge(s.a.values, s.b.values, RULE)  # the same windows as two samples
    assert independent.verdict == "unknown", independent.describe()


async def test_a_round_whose_b_ran_beside_a_hog_is_left_out_and_said() -> None:
    """Round 2's B ran beside a CPU hog (others' CPU 100% of a core, A's 5%) and read 15% more:
    the environment rule leaves that round out (both arms) and says so; the verdict rests on
    the other rounds. Without the rule the same windows read differently."""
    def run(shift: float | None) -> Scripted:
        b = itertools.cycle([30.0, 30.2, 29.9, 34.6, 34.4, 30.1, 29.9, 30.0, 30.2, 29.8, 30.1])
        others = {"a": itertools.cycle([5.0]),
                  "b": itertools.cycle([5.0, 5.0, 5.0, 100.0, 100.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0])}
        # A's scatter leaves the first look undecided: a second round is taken
        return Scripted({"a": itertools.cycle([30.0, 31.2, 28.9, 30.0, 30.1]), "b": b},
                        others=others, shift_pp=40.0 if shift else None)

    ruled = run(40.0)
    s = await ruled.run()
    assert s.b.left_out and s.a.left_out, s.environment  # the whole round, both arms
    assert any("round 2" in n and "left out" in n for n in s.environment), s.environment
    assert s.final.verdict == "same", [j.describe() for j in s.looks]
    bare = await run(None).run()
    assert not bare.environment and not bare.b.left_out
    assert bare.looks[1].delta_pct > s.looks[1].delta_pct  # the hog's round counted there


async def test_by_default_other_work_is_flagged_and_a_starved_target_left_out() -> None:
    """The profile's default (`environment_others_action = "flag"`): round 2's B beside a hog
    (others 100% of a core against 5%) is kept and said ("flagged (kept)"); a B whose target
    waited 30% of a core for a CPU is still left out -- only what the target felt drops a
    window. Blocks: a moved B is flagged, the verdict stands."""
    default = DecisionSection.model_fields["environment_others_action"].default
    assert default == "flag"
    b = itertools.cycle([30.0, 30.2, 29.9, 34.6, 34.4, 30.1, 29.9, 30.0, 30.2, 29.8, 30.1])
    hog = Scripted({"a": itertools.cycle([30.0, 31.2, 28.9, 30.0, 30.1]), "b": b},
                   shift_pp=40.0, others_action=default,
                   others={"a": itertools.cycle([5.0]),
                           "b": itertools.cycle([5.0] * 3 + [100.0] * 2 + [5.0] * 6)},
                   waits={"a": itertools.cycle([1.0]), "b": itertools.cycle([1.0])})
    s = await hog.run()
    assert any(n.startswith("flagged (kept): round 2") and "other work" in n
               for n in s.environment), s.environment
    assert not s.b.left_out and not s.a.left_out  # the hog's round counts
    starved = Scripted({"a": itertools.cycle([30.0, 31.2, 28.9, 30.0, 30.1]),
                        "b": itertools.cycle([30.0, 30.2, 29.9, 24.0, 24.1, 30.1, 29.9, 30.0])},
                       shift_pp=40.0, others_action=default,
                       others={"a": itertools.cycle([150.0]), "b": itertools.cycle([150.0])},
                       waits={"a": itertools.cycle([1.0]),
                              "b": itertools.cycle([1.0] * 3 + [30.0] * 2 + [1.0] * 6)})
    t = await starved.run()
    assert any(n.startswith("left out: round 2") and "waiting for a CPU" in n
               for n in t.environment), t.environment
    assert {3, 4} <= set(t.b.left_out)
    blocks = Scripted({"a": itertools.cycle([30.0, 30.2, 29.9]),
                       "b": itertools.cycle([25.0, 25.1, 24.9])}, interleave=False,
                      shift_pp=40.0, others_action=default,
                      others={"a": itertools.cycle([5.0]), "b": itertools.cycle([100.0])},
                      waits={"a": itertools.cycle([1.0]), "b": itertools.cycle([1.0])})
    u = await blocks.run()
    assert u.final.verdict == "improved", u.final.describe()
    assert any(n.startswith("flagged (kept): between A and B") for n in u.environment)


async def test_without_interleaving_a_is_measured_again_and_a_moved_lab_is_unknown() -> None:
    """Blocks (a flash that costs a reboot): after B decided, A again (min_windows); when the
    second A reads 20% above the first the verdict is "unknown: the lab moved", never the
    "regressed" B's windows alone would give. A lab that did not move keeps its verdict."""
    moving = Scripted({"a": itertools.cycle([30.0] * RULE.max_windows + [36.0, 36.2, 35.9]),
                       "b": itertools.cycle([36.0, 36.1, 35.9])}, interleave=False,
                      drift_check=True)
    s = await moving.run()
    assert s.a_again is not None and len(s.a_again.values) == RULE.min_windows
    assert s.final.verdict == "unknown" and s.final.decided
    assert s.final.note and "the lab moved" in s.final.note
    steady = Scripted({"a": itertools.cycle([30.0, 30.2, 29.9]),
                       "b": itertools.cycle([36.0, 36.1, 35.9])}, interleave=False,
                      drift_check=True)
    t = await steady.run()
    assert t.final.verdict == "regressed" and t.a_again is not None and t.final.note is None
    assert steady.segments[-1] == ("a", RULE.min_windows)


async def test_a_recent_a_is_reused_after_a_check_that_agrees() -> None:
    """Blocks: an earlier screening's 11 windows of A stand in for A's block once a check of
    min_windows windows agrees -- 3 windows of A measured instead of 11 -- and the screening
    says what it reused. A check that reads 20% higher measures A anew (at the cap)."""
    earlier = Arm(build_id="img-a", values=[30.0, 30.2, 29.9, 30.1, 29.8] * 2 + [30.0])
    ab = Scripted({"a": itertools.cycle([30.1, 29.9, 30.0]), "b": itertools.cycle([25.0, 25.1])},
                  interleave=False, reuse_a=earlier)
    s = await ab.run()
    assert ab.segments[0] == ("a", RULE.min_windows) and ("a", RULE.max_windows) not in ab.segments
    assert len(s.a.values) == 11 + RULE.min_windows and s.a_reused_from == "exp-earlier"
    assert s.a_reuse and "reused 11" in s.a_reuse and s.final.verdict == "improved"
    moved = Scripted({"a": itertools.cycle([36.0, 36.1, 35.9]), "b": itertools.cycle([25.0])},
                     interleave=False, reuse_a=earlier)
    t = await moved.run()
    assert t.a_reused_from is None and t.a_reuse and "measured anew" in t.a_reuse
    assert moved.segments[:2] == [("a", RULE.min_windows), ("a", RULE.max_windows - RULE.min_windows)]
    assert all(v > 35 for v in t.a.values)  # the earlier windows are not in it
    inter = Scripted({"a": itertools.cycle([30.0]), "b": itertools.cycle([25.0])}, reuse_a=earlier)
    u = await inter.run()
    assert u.a_reuse and u.a_reuse.startswith("not reused: interleaved") and u.a_reused_from is None


async def test_a_round_whose_b_was_starved_of_cpu_is_left_out() -> None:
    """The others' CPU reads the same in both arms (a saturated host reads ~full either way), but
    in round 2 the target waited 30% of a core for a CPU in B against 1% in A, and read 20% less
    CPU: the wait rule (10 pp) leaves the round out, so a starved B is not an "improvement"."""
    b = itertools.cycle([30.0, 30.2, 29.9, 24.0, 24.1, 30.1, 29.9, 30.0, 30.2, 29.8, 30.1])
    ab = Scripted({"a": itertools.cycle([30.0, 31.2, 28.9, 30.0, 30.1]), "b": b}, shift_pp=40.0,
                  others={"a": itertools.cycle([150.0]), "b": itertools.cycle([150.0])},
                  waits={"a": itertools.cycle([1.0]),
                         "b": itertools.cycle([1.0] * 3 + [30.0] * 2 + [1.0] * 6)})
    s = await ab.run()
    assert any("round 2" in n and "waiting for a CPU" in n for n in s.environment), s.environment
    assert 3 in s.b.left_out and 4 in s.b.left_out
    assert s.final.verdict == "same", [j.describe() for j in s.looks]


async def test_a_window_left_out_is_replaced_before_the_look_counts() -> None:
    """A window left out by the environment rule leaves B 2 of its 3 first windows: a round of
    replacements (both arms, so the round holds A and B) comes before the look, and the first
    look counts 3 kept windows per arm -- no verdict rests on 2 (a logfilt no-op read "improved"
    -8.3% on 2+3 kept windows), and no unplanned look spends alpha."""
    ab = Scripted({"a": itertools.cycle([30.0, 30.2, 29.9]), "b": itertools.cycle([25.0, 25.1, 24.9])},
                  shift_pp=40.0, others={"a": itertools.cycle([5.0]),
                                         "b": itertools.cycle([5.0, 5.0, 100.0] + [5.0] * 10)})
    s = await ab.run()
    assert ab.segments == [("a", 3), ("b", 3), ("b", 1), ("a", 1)], ab.segments
    assert s.b.left_out == [2] and len(s.looks) == 1, [j.describe() for j in s.looks]
    assert (s.final.n_a, s.final.n_b) == (4, 3) and s.final.verdict == "improved"


async def test_the_cap_counts_kept_windows_and_replacements_are_bounded() -> None:
    """The cap (11) counts kept windows: an undecidable no-op whose every 4th B window ran beside
    a hog takes windows past 11 to replace them -- but never more than max_windows + half of it
    per arm (16), so lab time stays bounded, and the last look is the cap's, decided."""
    ab = Scripted({"a": itertools.cycle([30.0, 40.0, 20.0]), "b": itertools.cycle([25.0, 38.0, 29.0])},
                  shift_pp=40.0, others={"a": itertools.cycle([5.0]),
                                         "b": itertools.cycle([5.0, 5.0, 5.0, 100.0])})
    s = await ab.run()
    taken = max(len(s.a.values), len(s.b.values))
    assert RULE.max_windows < taken <= RULE.max_windows + RULE.max_windows // 2, ab.segments
    assert s.b.left_out and s.final.decided and s.final.verdict == "unknown"
    assert [j.n_a for j in s.looks][:-1] == RULE.looks()[:len(s.looks) - 1]
    hogged = Scripted({"a": itertools.cycle([30.0, 40.0, 20.0]),
                       "b": itertools.cycle([25.0, 38.0, 29.0])},
                      shift_pp=40.0, others={"a": itertools.cycle([5.0]),
                                             "b": itertools.cycle([5.0, 100.0])})
    h = await hogged.run()  # half of B's windows left out: the limit, not the kept cap, stops it
    assert len(h.b.values) == RULE.max_windows + RULE.max_windows // 2 and h.final.decided


def test_niced_work_is_not_other_work() -> None:
    """others_pct counts user + system + steal beyond the target, not nice: a QEMU at nice 19
    fills what a -76% logfilt fix left idle (+46 pp in every B round), which is the patch, not
    the environment. A hog at nice 0 (the drift bench's) still reads as other work."""
    from datetime import UTC, datetime

    from labwarden.core.kernelsplit import CpuSplit, KernelSplit
    from labwarden.core.measurements import Window
    from labwarden.tools.abtest import window_env

    def split(user: float, nice: float) -> CpuSplit:
        return CpuSplit(cpu="all", ticks=200, user_pct=user, nice_pct=nice, system_pct=5.0,
                        irq_pct=0.0, softirq_pct=1.0, idle_pct=100 - user - nice - 6.0,
                        iowait_pct=0.0, steal_pct=0.0, busy_pct=user + nice + 6.0,
                        softirq_system_pct=6.0)

    def window(user: float, nice: float) -> Window:
        s = split(user, nice)
        # model_construct: a window's conditions (pins, host) are not what this reads
        k = KernelSplit(wall_s=4.0, total=s, per_cpu=[s, s], softirqs={}, busiest_cpu="cpu0",
                        busiest_softirq_system_pct=6.0)
        return Window.model_construct(rep=0, started_at=datetime.now(UTC), cpu_pct=20.0,
                                      wait_pct=None, kernel=k)

    quiet = window_env(window(user=10.0, nice=0.0))     # the target's 20% of 2 cores' 10%
    niced = window_env(window(user=10.0, nice=40.0))    # a nice-19 QEMU filling the idle CPU
    hog = window_env(window(user=60.0, nice=0.0))       # a busy loop at nice 0
    assert quiet and niced and hog
    assert quiet.others_pct == niced.others_pct == pytest.approx(10.0)
    assert hog.others_pct == pytest.approx(110.0)
