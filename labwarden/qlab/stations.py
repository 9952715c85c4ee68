"""Real stations on a qlab, from the host: `lw-sta` in the guest (POSIX sh) associates N
wpa_supplicant stations round-robin over the enabled VAPs and verifies both sides; this parses
what it says. The second wave's `wpa_supplicant` load driver calls the same guest commands."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from labwarden.core.devtext import quote
from labwarden.core.errors import LabError
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.qlab import guestssh

_LINE = re.compile(r"^associated (\d+)((?: \w+=\d+)*)$", re.M)


class StationsError(LabError):
    """lw-sta could not associate, verify or release (its reasons in `lines`)."""

    kind = "device"


class Held(BaseModel):
    total: int
    per_vap: dict[str, int] = Field(description="stations held per enabled VAP, in config order")
    seconds: float = Field(description="wall time of the guest command, from the host")


def _parse(out: str, seconds: float) -> Held:
    found = _LINE.findall(out)
    if not found:
        raise StationsError(f"lw-sta printed no `associated N ...` line: {out.strip()[-200:]!r}",
                            "run `lw-sta status` on the DUT")
    total, rest = found[-1]
    per_vap = {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
    return Held(total=int(total), per_vap=per_vap, seconds=seconds)


def _checked(res: guestssh.GuestResult, what: str) -> guestssh.GuestResult:
    if not res.ok:
        raise StationsError(f"{what} failed (exit {res.exit_status})",
                            "see the lines above; `wifi status` and `lw-sta status` on the DUT",
                            lines=res.stderr.strip().splitlines()[-20:])
    return res


def associate(ep: SshEndpoint, n: int, timeout_s: int = 180) -> Held:
    """Hold exactly stations 1..n (verified from both sides by lw-sta)."""
    res = guestssh.run_sync(ep, ["lw-sta", "assoc", str(n), str(timeout_s)], timeout=timeout_s + 60)
    return _parse(_checked(res, f"lw-sta assoc {n}").stdout, res.seconds)


def verify(ep: SshEndpoint) -> Held:
    res = guestssh.run_sync(ep, ["lw-sta", "verify"], timeout=120)
    return _parse(_checked(res, "lw-sta verify").stdout, res.seconds)


def release(ep: SshEndpoint, timeout_s: int = 120) -> int:
    """Disassociate every held station; returns how many (verified gone from their APs)."""
    res = _checked(guestssh.run_sync(ep, ["lw-sta", "release", str(timeout_s)], timeout=timeout_s + 60),
                   "lw-sta release")
    m = re.search(r"^released (\d+)$", res.stdout, re.M)
    if not m:
        raise StationsError(f"lw-sta release printed {quote(res.stdout)}", "run it on the DUT")
    return int(m.group(1))
