"""cpufreq knobs: every CPU's scaling governor pinned to `performance`, and boost/turbo off.
Read from the sysfs the lab profile names (`[dut.paths] sysfs`). A DUT without cpufreq (a VM, many
routers) has neither: both are then not applicable, never faked."""

from __future__ import annotations

from labwarden.lab.knobs.base import Knob, KnobState, write_value


def cpufreq_dir(sysfs: str) -> str:
    return f"{sysfs.rstrip('/')}/devices/system/cpu"


class Governor(Knob):
    name = "governor"
    requirement = "env_pinned"
    refusal = "env_unpinned"
    remedy = 'allow healing ([policy] heal = ["governor", ...]) or pin it (env_pin)'

    @property
    def base(self) -> str:
        return cpufreq_dir(self.profile.dut.paths.sysfs)

    async def available(self) -> str | None:
        return await self.missing(f"{self.base}/cpu0/cpufreq/scaling_governor", "cpufreq on this DUT")

    async def governors(self) -> list[str]:
        """Each CPU's governor, in CPU order ("unavailable" where unreadable)."""
        ls = await self.dev.run(["ls", self.base])
        cpus = sorted((n for n in ls.stdout.split() if n.startswith("cpu") and n[3:].isdigit()),
                      key=lambda n: int(n[3:]))
        out = []
        for cpu in cpus:
            try:
                out.append((await self.dev.read_file(f"{self.base}/{cpu}/cpufreq/scaling_governor"))
                           .decode().strip())
            except Exception:
                out.append("unavailable")
        return out

    async def read(self) -> KnobState:
        govs = await self.governors()
        ok = bool(govs) and all(g == "performance" for g in govs)
        return KnobState(name=self.name, value=",".join(govs) or "none", ok=ok,
                         advice=None if ok else "pin every CPU's scaling_governor to performance")

    async def pin(self) -> list[str]:
        changed = []
        for i, gov in enumerate(await self.governors()):
            if gov != "performance":
                await write_value(self.dev, f"{self.base}/cpu{i}/cpufreq/scaling_governor", "performance")
                changed.append(f"cpu{i} scaling_governor {gov} -> performance")
        return changed


class Boost(Knob):
    name = "boost"
    requirement = "env_pinned"
    refusal = "env_unpinned"
    remedy = 'allow healing ([policy] heal = ["boost", ...]) or pin it (env_pin)'

    @property
    def path(self) -> str:
        return f"{cpufreq_dir(self.profile.dut.paths.sysfs)}/cpufreq/boost"

    async def available(self) -> str | None:
        gov = f"{cpufreq_dir(self.profile.dut.paths.sysfs)}/cpu0/cpufreq/scaling_governor"
        return (await self.missing(gov, "cpufreq on this DUT")
                or await self.missing(self.path, "cpufreq boost on this DUT"))

    async def read(self) -> KnobState:
        val = (await self.dev.read_file(self.path)).decode().strip()
        return KnobState(name=self.name, value=val, ok=val == "0",
                         advice=None if val == "0" else "turn boost/turbo off (write 0)")

    async def pin(self) -> list[str]:
        state = await self.read()
        if state.ok:
            return []
        await write_value(self.dev, self.path, "0")
        return [f"boost {state.value} -> 0"]
