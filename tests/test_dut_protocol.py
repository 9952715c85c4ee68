"""Device satisfies DutAccess, the protocol tools program against: the same methods, each with the
same signature (names, kinds, defaults and annotations), and no public method outside it.

No DUT is needed: a Device connects only when asked to, so these run without the vlab.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path

import asyncssh

from labwarden.lab.dut.commands import RunResult
from labwarden.lab.dut.device import Device
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.dut.protocol import DutAccess

TOOLS_USE = {"run", "exec", "read_file", "read_head", "write_file", "put", "get", "sha256", "pidof", "signal",
             "wait_reachable", "connect", "close"}


def _methods(cls: type) -> dict[str, Callable[..., object]]:
    """Public methods a class defines itself or inherits (properties and dunders left out)."""
    found: dict[str, Callable[..., object]] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or klass.__module__ == "typing":  # Protocol's and Generic's own
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and inspect.isfunction(value):
                found[name] = value
    return found


def _drift(impl: type, proto: type) -> list[str]:
    """How `impl` departs from `proto`: missing, extra, sync/async or signature differences."""
    want, have = _methods(proto), _methods(impl)
    problems = [f"{name}: missing" for name in sorted(want.keys() - have.keys())]
    problems += [f"{name}: public but not in {proto.__name__}" for name in sorted(have.keys() - want.keys())]
    for name in sorted(want.keys() & have.keys()):
        w, h = want[name], have[name]
        if inspect.iscoroutinefunction(w) != inspect.iscoroutinefunction(h):
            problems.append(f"{name}: async in one, not in the other")
        w_sig, h_sig = inspect.signature(w, eval_str=True), inspect.signature(h, eval_str=True)
        if w_sig != h_sig:
            problems.append(f"{name}{h_sig} != {name}{w_sig}")
    return problems


def _device() -> Device:
    host_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    return Device(SshEndpoint(host="127.0.0.1", port=2222, key="/nonexistent/id", host_key=host_key))


def test_protocol_lists_what_tools_use() -> None:
    assert set(_methods(DutAccess)) == TOOLS_USE


def test_device_is_a_dut_access() -> None:
    dev = _device()
    assert isinstance(dev, DutAccess)
    assert _drift(Device, DutAccess) == []


class _LostCheck(Device):
    async def run(self, argv: Sequence[str], *, timeout: float = 30, cap: int = 65536) -> RunResult:  # type: ignore[override]
        return await super().run(argv, timeout=timeout, cap=cap)


class _RenamedPut(Device):
    async def put(self, src: Path, remote: str) -> str:  # type: ignore[override]
        return await super().put(src, remote)


class _Extra(Device):
    async def reboot(self) -> None:
        await self.run(["reboot"])


def test_drift_is_caught() -> None:
    """The check above can fail: a dropped keyword, a renamed parameter and an extra public
    method each show up, although isinstance (which looks only at names) still passes."""
    for cls in (_LostCheck, _RenamedPut, _Extra):
        assert isinstance(object.__new__(cls), DutAccess)
    assert [p.split("(")[0] for p in _drift(_LostCheck, DutAccess)] == ["run"]
    assert [p.split("(")[0] for p in _drift(_RenamedPut, DutAccess)] == ["put"]
    assert _drift(_Extra, DutAccess) == ["reboot: public but not in DutAccess"]


def test_a_missing_method_fails_isinstance() -> None:
    class NoSignal:
        pass

    for name in TOOLS_USE - {"signal"}:
        setattr(NoSignal, name, getattr(Device, name))
    assert not isinstance(NoSignal(), DutAccess)
    assert "signal: missing" in _drift(NoSignal, DutAccess)
