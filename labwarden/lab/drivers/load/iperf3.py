"""`[load] kind = "iperf3"`: traffic through the DUT, from iperf3 on load hosts on either side.

The client runs on the lan side and the server on the wan side, each through its argv prefix
(`[load] client` / `server`: a host netns, or `ssh` to a bench's load host). `window()` runs one
measured window (`iperf3 --json`, the server's own view fetched with --get-server-output) and
returns what iperf3 itself says -- achieved rate, loss, jitter, retransmits, per-interval series --
checked against what was asked. `hold(n)` keeps n TCP streams running until `hold(0)` (the
LoadDriver seam: `measure`/`sweep` windows under load; 0 = the load stopped, an idle baseline).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from labwarden.core.devtext import quote
from labwarden.lab.config import Iperf3LoadSection
from labwarden.lab.drivers.load.base import LoadError

ON_TARGET_PCT = 10.0
"""A UDP window whose sender fell more than this short of the offered rate says so."""


class TrafficSpec(BaseModel):
    """What one window offers: iperf3's -u, -R, -l, -P, -b."""

    proto: Literal["tcp", "udp"] = Field("udp", description="udp (-u) or tcp")
    direction: Literal["up", "down"] = Field("up", description="up: lan -> wan (the client sends); "
                                             "down: wan -> lan (iperf3 -R)")
    length: int | None = Field(None, ge=16, le=65507, description="bytes per write (-l): the UDP "
                               "payload per datagram; None: iperf3's default", examples=[1200])
    streams: int = Field(1, ge=1, le=32, description="parallel streams (-P)")
    bitrate_mbps: float | None = Field(None, gt=0, le=100000, description="target rate (-b), "
                                       "Mbit/s over all streams; UDP needs one, TCP None = as "
                                       "fast as it goes", examples=[100])
    omit_s: int = Field(0, ge=0, le=10, description="seconds left out of the results at the "
                        "start (-O): the ramp, ARP, a cold path")

    @model_validator(mode="after")
    def _udp_rate(self) -> TrafficSpec:
        if self.proto == "udp" and self.bitrate_mbps is None:
            raise ValueError("a UDP window needs bitrate_mbps (iperf3's own default is 1 Mbit/s)")
        return self

    def argv(self) -> list[str]:
        out = ["-u"] if self.proto == "udp" else []
        if self.direction == "down":
            out.append("-R")
        if self.length is not None:
            out += ["-l", str(self.length)]
        if self.streams > 1:
            out += ["-P", str(self.streams)]
        if self.bitrate_mbps is not None:
            # -b is per stream: the total is split evenly
            out += ["-b", f"{self.bitrate_mbps * 1e6 / self.streams:.0f}"]
        if self.omit_s:
            out += ["-O", str(self.omit_s)]
        return out


class TrafficInterval(BaseModel):
    """One of iperf3's 1 s intervals, as the receiver saw it."""

    start_s: float
    end_s: float
    mbps: float
    packets: int | None = Field(None, description="UDP datagrams received")
    lost_pct: float | None = Field(None, description="UDP loss in the interval, %")


class TrafficWindow(BaseModel):
    """One iperf3 run: what was asked, and what iperf3's JSON says happened."""

    spec: TrafficSpec
    started_at: datetime
    duration_s: float = Field(description="the receiver's test length, s (longer than the sender's "
                              "when the path holds packets back)")
    sent_s: float = Field(0.0, description="the sender's test length, s")
    offered_mbps: float | None = Field(description="asked: -b over all streams (None: TCP unlimited)")
    sent_mbps: float = Field(description="the sender's rate (end.sum_sent)")
    achieved_mbps: float = Field(description="the receiver's rate (end.sum_received)")
    loss_pct: float | None = Field(description="UDP: lost / sent datagrams, % (end.sum_received)")
    lost_packets: int | None = None
    packets: int | None = Field(None, description="UDP datagrams sent")
    received_pps: float | None = Field(None, description="UDP datagrams received per second")
    offered_pps: float | None = Field(None, description="UDP datagrams asked per second "
                                      "(-b / -l; None without a length)")
    jitter_ms: float | None = None
    retransmits: int | None = Field(None, description="TCP retransmits (sender side)")
    intervals: list[TrafficInterval] = Field(description="the receiver's 1 s series")
    on_target: bool = Field(description="the sender reached the offered rate (within "
                            f"{ON_TARGET_PCT:g}%); always true without an offered rate")
    check: str | None = Field(None, description="what fell short of what was asked, and where")


def parse(doc: dict[str, Any], spec: TrafficSpec, started_at: datetime) -> TrafficWindow:
    """A window from the client's `iperf3 --json --get-server-output` document."""
    end = doc.get("end") or {}
    sent, received = end.get("sum_sent") or end.get("sum") or {}, end.get("sum_received") or {}
    if not sent or not received:
        raise ValueError("no end.sum_sent / end.sum_received in iperf3's JSON")
    # the receiver's per-interval series: the server's for up, the client's own for -R
    receiver = doc if spec.direction == "down" else (doc.get("server_output_json") or {})
    intervals = []
    for iv in receiver.get("intervals") or []:
        s = iv.get("sum") or {}
        intervals.append(TrafficInterval(
            start_s=round(float(s.get("start", 0)), 3), end_s=round(float(s.get("end", 0)), 3),
            mbps=round(float(s.get("bits_per_second", 0)) / 1e6, 3),
            packets=(int(s["packets"]) - int(s.get("lost_packets", 0))) if "packets" in s else None,
            lost_pct=round(float(s["lost_percent"]), 3) if "lost_percent" in s else None))
    udp = spec.proto == "udp"
    seconds = float(received.get("seconds") or sent.get("seconds") or 0.0)
    offered = spec.bitrate_mbps
    sent_mbps = float(sent.get("bits_per_second", 0)) / 1e6
    packets = int(received["packets"]) if udp and "packets" in received else None
    lost = int(received["lost_packets"]) if udp and "lost_packets" in received else None
    on_target, check = True, None
    if offered is not None and sent_mbps < offered * (1 - ON_TARGET_PCT / 100):
        on_target = False
        check = (f"the sender reached {sent_mbps:.1f} Mbit/s of the {offered:g} offered: the load "
                 "host (or the DUT's back-pressure on TCP) is the limit, not only the DUT's loss")
    return TrafficWindow(
        spec=spec, started_at=started_at, duration_s=round(seconds, 3),
        sent_s=round(float(sent.get("seconds") or 0.0), 3), offered_mbps=offered,
        sent_mbps=round(sent_mbps, 3),
        achieved_mbps=round(float(received.get("bits_per_second", 0)) / 1e6, 3),
        loss_pct=round(float(received.get("lost_percent", 0.0)), 3) if udp else None,
        lost_packets=lost, packets=packets,
        received_pps=round((packets - (lost or 0)) / seconds, 1) if packets is not None and seconds else None,
        offered_pps=round(offered * 1e6 / (8 * spec.length), 1) if udp and offered and spec.length else None,
        jitter_ms=round(float(received["jitter_ms"]), 4) if udp and "jitter_ms" in received else None,
        retransmits=int(sent["retransmits"]) if not udp and "retransmits" in sent else None,
        intervals=intervals, on_target=on_target, check=check)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


_HELD: dict[tuple[str, ...], list[asyncio.subprocess.Process]] = {}
"""Held load per lab (its client prefix and port), across driver instances of this process."""
_STREAMS: dict[tuple[str, ...], int] = {}
"""How many streams each held client runs (what `held` answers from)."""


@atexit.register
def _release_at_exit() -> None:
    """A held load never outlives the process that holds it (a run that stopped half-way would
    leave iperf3 streaming through the DUT, and the port taken for the next hold)."""
    for procs in _HELD.values():
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)


class Iperf3:
    kind: ClassVar[str] = "iperf3"
    axis: ClassVar[str | None] = "streams"
    default_points: ClassVar[tuple[int, ...]] = (1, 4, 8)
    stops_traffic: ClassVar[bool] = True

    def __init__(self, section: Iperf3LoadSection):
        self.section = section
        self.radios = section.radios

    def _argv(self, side: list[str], *args: str) -> list[str]:
        return [*side, self.section.iperf3, *args]

    async def _spawn(self, argv: list[str], out: int | None) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            raise LoadError(f"cannot start `{argv[0]}`: {exc}",
                            "check [load] client / server / iperf3 in the lab profile") from exc

    async def _server(self, port: int) -> asyncio.subprocess.Process:
        """A one-off server (it exits after one test), listening once this returns."""
        proc = await self._spawn(self._argv(self.section.server, "-s", "-1", "--json", "-p", str(port)),
                                 asyncio.subprocess.DEVNULL)
        await asyncio.sleep(0.3)  # the client retries below if the listen was slower
        if proc.returncode is not None:
            err = (await proc.stderr.read()).decode(errors="replace") if proc.stderr else ""
            raise LoadError(f"the iperf3 server exited {proc.returncode}: {quote(err)}",
                            f"is port {port} free on the server side? ([load] port)")
        return proc

    async def window(self, spec: TrafficSpec, seconds: float) -> TrafficWindow:
        """One measured window of `seconds` (whole seconds, >= 1)."""
        started = datetime.now(UTC)
        doc = await self.run_json(spec, seconds)
        try:
            return parse(doc, spec, started)
        except (ValueError, KeyError, TypeError) as exc:
            raise LoadError(f"iperf3's JSON could not be read: {exc}", "check the iperf3 version "
                            "on the load hosts (3.12, Debian bookworm's, writes end.sum_sent and "
                            "end.sum_received)") from exc

    async def run_json(self, spec: TrafficSpec, seconds: float) -> dict[str, Any]:
        """The client's `iperf3 --json --get-server-output` document of one run."""
        secs = max(1, round(seconds))
        port = self.section.port
        server = await self._server(port)
        try:
            argv = self._argv(self.section.client, "-c", self.section.server_addr, "-p", str(port),
                              "-t", str(secs), "--json", "--get-server-output", *spec.argv())
            for attempt in range(10):  # the one-off server may still be binding
                client = await self._spawn(argv, asyncio.subprocess.PIPE)
                try:
                    async with asyncio.timeout(secs + spec.omit_s + self.section.timeout_s):
                        out, err = await client.communicate()
                except BaseException:
                    await _kill(client)
                    raise
                text = out.decode(errors="replace")
                if client.returncode == 0:
                    break
                if "Connection refused" not in text or attempt == 9:
                    raise LoadError(f"`{' '.join(argv)}` exited {client.returncode}: "
                                    f"{_error(text, err)}", "run it by hand on the client side; "
                                    "does the DUT route lan -> wan? (`lw-route status` on the qlab)")
                await asyncio.sleep(0.3)
        except TimeoutError as exc:
            raise LoadError(f"iperf3 did not finish a {secs} s window within "
                            f"{secs + self.section.timeout_s:g} s", "raise [load] timeout_s, or "
                            "check that the DUT forwards (a hung TCP connect)") from exc
        finally:
            await _kill(server)
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise LoadError(f"iperf3 wrote no JSON: {quote(text)}",
                            "check the iperf3 binary on the client side") from exc
        if not isinstance(doc, dict):
            raise LoadError("iperf3's JSON is not an object", "check the iperf3 version")
        if doc.get("error") and not (doc.get("end") or {}).get("sum_received"):
            raise LoadError(f"iperf3 failed: {quote(doc['error'])}", "run the window by hand on "
                            "the client side; a datagram above the path's MTU (a tunnel's) is "
                            "fragmented or dropped: try a smaller length")
        return doc

    async def hold(self, clients: int) -> None:
        """Replace the held load by `clients` TCP streams (0 = stop it: an idle DUT)."""
        key = (*self.section.client, str(self.section.port + 1))
        for proc in _HELD.pop(key, []):
            await _kill(proc)
        if clients == 0:
            return
        port = self.section.port + 1
        server = await self._server(port)
        client = await self._spawn(self._argv(self.section.client, "-c", self.section.server_addr,
                                              "-p", str(port), "-t", "0", "-P", str(clients)),
                                   asyncio.subprocess.DEVNULL)
        _HELD[key] = [client, server]
        _STREAMS[key] = clients
        await asyncio.sleep(1.0)
        if client.returncode is not None:
            err = (await client.stderr.read()).decode(errors="replace") if client.stderr else ""
            await _kill(server)
            _HELD.pop(key, None)
            raise LoadError(f"the held iperf3 client exited {client.returncode}: {quote(err)}",
                            "does the DUT route lan -> wan? (`lw-route status` on the qlab)")

    async def held(self, clients: int) -> bool:
        key = (*self.section.client, str(self.section.port + 1))
        procs = _HELD.get(key, [])
        if clients == 0:
            return not procs
        return bool(procs) and all(p.returncode is None for p in procs) \
            and _STREAMS.get(key) == clients

    def where(self) -> str:
        return f"iperf3 on the load hosts ({' '.join(self.section.client)} / {' '.join(self.section.server)})"


def _error(out: str, err: bytes) -> str:
    """iperf3's own error (quoted: load-host text reaches the model)."""
    with contextlib.suppress(ValueError, AttributeError):
        msg = json.loads(out).get("error")
        if msg:
            return quote(str(msg))
    return quote(err.decode(errors="replace") or out)
