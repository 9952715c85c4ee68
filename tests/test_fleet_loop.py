"""The loop on a fleet: experiments spread over two places, reproduced on the other before a
keep, every event naming its place, a dead place marked bad and its experiment retried on the
other -- on two real vlabs behind a real labgrid coordinator and exporter (`vlab up --places 2`).

The model is the Messages API stand-in (tests/messages_standin.py): the only fake -- tools,
guard, transcript, coordinator, exporter and DUTs are real.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labwarden.core.placehealth import HealthStore
from labwarden.tools.bisect import narrow, split


def test_bisect_split_over_places() -> None:
    """One place halves the range as before; k places cut it into k + 1 parts each round."""
    assert split(-1, 7, 1) == [3]
    assert split(-1, 6, 1) == [2]
    assert split(-1, 8, 2) == [2, 5]  # 3 parts of 3
    assert split(-1, 2, 4) == [0, 1]  # never more points than candidates
    assert split(3, 5, 2) == [4]
    # first bad at 5: keep (2, 5]; the good before it moves lo
    assert narrow(-1, 8, [2, 5], ["good", "bad"]) == (2, 5, None)
    assert narrow(-1, 8, [2, 5], ["bad", "bad"]) == (-1, 2, None)
    assert narrow(-1, 8, [2, 5], ["good", "good"]) == (5, 8, None)
    # an undecided commit inside the range left stops it; one outside does not
    assert narrow(-1, 8, [2, 5], ["unknown", "bad"]) == (-1, 5, 2)
    assert narrow(-1, 8, [2, 5], ["bad", "unknown"]) == (-1, 2, None)


def test_health_bad_needs_a_person(tmp_path: Path) -> None:
    """good/unknown/bad with the reason; a bad place is not made good again by a later call."""
    store = HealthStore(tmp_path)
    assert store.get("vlab-0").state == "unknown" and store.bad() == set()
    assert store.mark("vlab-0", "good", None)
    assert not store.mark("vlab-0", "good", None)  # unchanged: no new record
    assert store.mark("vlab-1", "bad", "the DUT does not answer")
    assert not store.mark("vlab-1", "good", None)
    assert store.bad() == {"vlab-1"}
    assert store.get("vlab-1").reason == "the DUT does not answer"
    assert {p: h.state for p, h in HealthStore(tmp_path).all().items()} == {"vlab-0": "good",
                                                                           "vlab-1": "bad"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LG_COORDINATOR", "LG_USERNAME", "LG_HOSTNAME", "LG_ENV"):
        monkeypatch.delenv(var, raising=False)
