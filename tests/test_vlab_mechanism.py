"""The vlab's mechanism, shown by exact counters: real uprobes on dm_finalize_transaction.

Each VAP is polled once a second and each poll syncs every station on it, so on the baseline
the write-transaction rate equals the number of associated stations per second. 0901 gates the
write-back on real change: in steady state the rate falls to ~0. Stopping the monitor stops it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from labwarden.core.measurements import MeasurementRecord
from labwarden.core.records import RecordStore
from labwarden.lab.host import tracefs
from labwarden.vlab import control, procs, tuning
from labwarden.vlab.layout import VlabLayout

from .conftest import needs_uprobes, vlab_probes
from .tooling import baseline, ok

WINDOW_S = 3.0


@pytest.fixture(autouse=True)
def _uprobes() -> None:
    needs_uprobes()


def _txn_rate(layout: VlabLayout) -> float:
    pid = procs.read_pid(layout.run_dir / "stad.pid")
    assert pid is not None
    lib = layout.rootfs / "usr" / "lib" / "libsta.so"
    with tracefs.registered({"txn": (lib, "dm_finalize_transaction")}) as events:
        counts = tracefs.count(events, pid, WINDOW_S)
    return counts["labwarden:txn"] / WINDOW_S


@pytest.mark.parametrize("stations", [18, 60])
def test_baseline_one_write_txn_per_station_per_second(lab: VlabLayout,
                                                       stations: int) -> None:
    control.associate(lab.root, stations)
    time.sleep(1.0)
    rate = _txn_rate(lab)
    assert 0.8 * stations <= rate <= 1.2 * stations, rate


def test_stopping_the_monitor_stops_the_writes(lab: VlabLayout) -> None:
    control.associate(lab.root, 18)
    stamon = procs.read_pid(lab.run_dir / "stamon.pid")
    assert stamon is not None
    os.kill(stamon, signal.SIGSTOP)
    try:
        time.sleep(1.2)  # let an in-flight poll finish
        assert _txn_rate(lab) == 0
    finally:
        os.kill(stamon, signal.SIGCONT)
    time.sleep(1.5)
    assert _txn_rate(lab) > 0.8 * 18


@pytest.mark.anyio
async def test_profile_counts_every_window_and_removes_its_probes(lab: VlabLayout) -> None:
    """The same counters through the profile tool: each window's perf stat is collected after
    the next window has started (profile._window), so every window must still get its own
    exact rate, and every probe must be gone when the tool returns."""
    await ok(lab, "fingerprint_verify", {"build_id": baseline(lab)})
    res = await ok(lab, "measure", {"stations": 18, "window_s": 3, "reps": 3, "perf": False})
    record = RecordStore(lab.data_dir).load("prof", res["profile_id"], MeasurementRecord)
    rates = [w.counters.get("dm_write_txns") for w in record.windows]
    assert all(r is not None and 0.8 * 18 <= r <= 1.2 * 18 for r in rates), rates
    assert all(w.counters.get("rpc_calls", 0) > 0 for w in record.windows), record.windows
    assert vlab_probes(lab) == []


def test_0901_gates_the_write_back(lab: VlabLayout) -> None:
    control.flash(lab.root, ["0901"])
    tuning.pin(lab)  # the flash rebooted the DUT: undo drift, keep the topology
    control.restart_services(lab.root)
    control.associate(lab.root, 60)
    time.sleep(2.0)  # the first sync of each new station writes once
    rate = _txn_rate(lab)
    assert rate <= 0.05 * 60, rate
