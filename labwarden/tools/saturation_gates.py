"""The gates of a traffic A/B, on saturation records: what `gate_check {saturate_id}` judges.

A saturation answer may be believed when its own check held (a window at 1.2x the answer lost
more than the threshold, one at 0.8x did not), when the sender reached every rate it called
stable (a sender that fell short makes any rate look stable), and when every window ran on the
verified image with the profile's conditions. Against a baseline run, both runs must have asked
the same question (length, direction, loss threshold, window length); whether the rate improved
is saturate's own `vs_baseline` (judged against the baseline's 1.2x check), shown beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labwarden.core.conditions import verified_evidence
from labwarden.results.saturate import SatStep, SaturateRecord

Judge = Callable[[str, bool, str], Any]
NotApplicable = Callable[[str, str], Any]


def _rate(s: SatStep) -> str:
    return f"{s.offered_pps} pps: {s.shortfall_pct}% short"


def gates(rec: SaturateRecord, base: SaturateRecord | None, judged: Judge,
          not_applicable: NotApplicable) -> list[Any]:
    r = rec.result
    out = []
    if r.stable_pps is None:
        out.append(judged("saturation_confirmed", False, f"no rate was stable within "
                          f"{r.loss_max_pct:g}% ({len(r.steps)} windows)"))
    elif r.confirmed is None:
        out.append(not_applicable("saturation_confirmed", "the run was asked not to verify "
                                  "(verify: false): its answer is unchecked"))
    else:
        above, below = r.verify_above, r.verify_below
        assert above is not None and below is not None
        out.append(judged("saturation_confirmed", r.confirmed,
                          f"answer {r.stable_pps} pps; at 1.2x {_rate(above)} (must exceed "
                          f"{r.loss_max_pct:g}%), at 0.8x {_rate(below)} (must not)"))
    stable = [s for s in [*r.steps, r.verify_below] if s is not None and s.stable]
    short = [s.offered_pps for s in stable if not s.on_target]
    out.append(judged("load_on_target", bool(stable) and not short,
                      f"the sender fell short at stable rate(s) {short}" if short else
                      f"the sender reached all {len(stable)} rate(s) called stable"
                      if stable else "no stable window"))
    ok, evidence = verified_evidence([(f"window {i}", w.conditions)
                                        for i, w in enumerate(rec.windows)])
    out.append(judged("conditions_verified", ok, evidence))
    if base is not None:
        asked = ("length", "direction", "loss_max_pct", "window_s")
        a, b = base.input.model_dump(include=set(asked)), rec.input.model_dump(include=set(asked))
        differ = [f"{k} {a[k]} vs {b[k]}" for k in asked if a[k] != b[k]]
        out.append(judged("same_question", not differ, "; ".join(differ) or
                          f"both runs: {b['length']} B {b['direction']}, loss <= "
                          f"{b['loss_max_pct']:g}%, {b['window_s']:g} s windows (baseline "
                          f"{base.id}: {base.result.stable_pps} pps)"))
    return out
