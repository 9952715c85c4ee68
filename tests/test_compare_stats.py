"""compare's verdicts from its statistics, on plain numbers (no lab needed)."""

from __future__ import annotations

import random
import warnings

import pytest
from scipy import stats

from labwarden.tools.compare import welch_delta


def test_welch_p_value_is_scipys() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.gauss(30, 1) for _ in range(rng.randint(2, 6))]
        b = [rng.gauss(29, 2) for _ in range(rng.randint(2, 6))]
        expected = stats.ttest_ind(b, a, equal_var=False).pvalue
        assert welch_delta(a, b, 0.05, 5.0).p_value == pytest.approx(expected, abs=1e-6)


def test_repeated_reps_judge_without_warnings() -> None:
    """Tick-quantised CPU% often repeats exactly across reps: no RuntimeWarning, a sound verdict."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = welch_delta([35.64, 35.64, 35.64], [22.3, 22.5, 22.4], 0.05, 5.0)
    assert d.verdict == "improved" and d.p_value is not None and d.p_value < 0.001


@pytest.mark.parametrize(("a", "b", "verdict"), [
    ([30.0, 30.4, 29.8], [30.1, 29.9, 30.2], "same"),
    ([30.0, 30.4, 29.8], [36.0, 36.4, 35.8], "regressed"),
    ([30.0], [20.0], "unknown"),
])
def test_verdicts(a: list[float], b: list[float], verdict: str) -> None:
    assert welch_delta(a, b, 0.05, 5.0).verdict == verdict
