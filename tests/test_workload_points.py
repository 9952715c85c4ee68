"""Workload points a lab cannot hold are refused (lab/workload.py): on the logfilt DUT -- a daemon
with no load (`[load] kind = "none"`) -- `measure` at 18 clients and `sweep` over [0, 18] are
refused `not_applicable` naming the argument and the remedy (0), before anything runs or is
recorded; at 0 both still measure. Before, both answered ok and recorded 18 stations the DUT
never held. A real DUT behind dropbear (tests/stockdut.py), built, flashed and verified."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labwarden.core.records import RecordStore
from labwarden.lab.config import LabProfile
from labwarden.runtime.runner import call_tool
from labwarden.runtime.session import open_lab
from labwarden.vlab import stockssh
from tests import stockdut

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def logfilt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[stockssh.StockSsh, Path]]:
    yield from stockdut.logfilt_dut(tmp_path_factory.mktemp("logfilt"))


def _records(lab: Path, kind: str) -> list[str]:
    return RecordStore(LabProfile.from_file(lab).data_dir()).ids(kind)


async def test_clients_on_a_lab_without_a_load_are_refused_naming_the_field(
        logfilt: tuple[stockssh.StockSsh, Path]) -> None:
    _server, lab = logfilt
    prof = LabProfile.from_file(lab)
    async with open_lab(prof) as ctx:
        built = await call_tool(ctx, "build", {})
        assert built.ok and built.result is not None, built.error
        build_id = built.result["build_id"]
        for tool, args in (("flash", {"build_id": build_id}),
                           ("fingerprint_verify", {"build_id": build_id})):
            rec = await call_tool(ctx, tool, args)
            assert rec.ok, f"{tool}: {rec.error!s}"
        measured_before = _records(lab, "prof")
        swept_before = _records(lab, "swp")

        window: dict[str, Any] = {"window_s": 2, "reps": 1, "perf": False, "uprobes": False}
        refused = await call_tool(ctx, "measure", {"stations": 18, **window})
        assert refused.error is not None and refused.error.code == "not_applicable", refused
        assert refused.error.message.startswith("stations: 18"), refused.error.message
        assert '[load] kind = "none"' in refused.error.message
        assert "stations 0" in (refused.error.remedy or "")

        refused = await call_tool(ctx, "sweep", {"densities": [0, 18], "reps": 1, "window_s": 2,
                                                 "perf": False})
        assert refused.error is not None and refused.error.code == "not_applicable", refused
        assert refused.error.message.startswith("densities: 18"), refused.error.message
        assert "densities [0]" in (refused.error.remedy or "")
        # nothing was measured for either: no record of stations the DUT never held
        assert _records(lab, "prof") == measured_before
        assert _records(lab, "swp") == swept_before

        # the one point this lab has still measures
        at_zero = await call_tool(ctx, "measure", {"stations": 0, **window})
        assert at_zero.ok and at_zero.result is not None, at_zero.error
        assert at_zero.result["stations"] == 0
        swept = await call_tool(ctx, "sweep", {"densities": [0], "reps": 1, "window_s": 2,
                                               "perf": False})
        assert swept.ok and swept.result is not None, swept.error
        assert [p["stations"] for p in swept.result["points"]] == [0]
        default = await call_tool(ctx, "sweep", {"reps": 1, "window_s": 2, "perf": False})
        assert default.ok, default.error  # the load's own points: [0]
