"""The lab profile: one TOML file describing a lab (DUT access, build, flash, load, target,
gates, policy). Validated strictly: unknown keys are refused, and every error names the key,
what was expected and an example, so a typo never silently changes what gets measured.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from labwarden.core.decision import DecisionRule
from labwarden.core.errors import LabError
from labwarden.lab.dut.endpoint import SshEndpoint
from labwarden.lab.labgrid import fleet_selector


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LabSection(_Strict):
    name: str = Field(examples=["vlab", "ospv2-bench-3"], description="the lab's name, shown in "
                      "lab_status, reports and transcripts")
    kind: Literal["vlab", "real"] = Field("real", examples=["vlab"], description="`vlab` for a "
                                          "profile `labwarden vlab up` wrote (no flash budget by "
                                          "default; its remedies name `vlab` commands); `real` "
                                          "for every other DUT, the qlab's included")
    data_dir: str | None = Field(None, description="where records and artifacts are kept "
                                 "(default: labwarden-data/ beside the profile)")


class SshSection(_Strict):
    host: str = Field(examples=["192.168.1.1"], description="the DUT's SSH address")
    port: int = Field(22, ge=1, le=65535, examples=[22], description="the DUT's SSH port")
    user: str = Field("root", examples=["root"], description="the SSH user: root, for perf, "
                      "uprobes and SIGSTOP")
    key: str = Field(examples=["~/.ssh/id_ed25519"], description="private key file labwarden "
                     "logs in with (never a password)")
    host_key: str | None = Field(None, examples=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA..."],
                                 description="the DUT's public host key, pinned: a DUT that "
                                 "answers with another key is refused (this or known_hosts)")
    known_hosts: str | None = Field(None, examples=["~/.ssh/known_hosts"], description="a "
                                    "known_hosts file holding the DUT's host key (instead of "
                                    "host_key)")

    @model_validator(mode="after")
    def _pinned(self) -> SshSection:
        if not self.host_key and not self.known_hosts:
            raise ValueError("the DUT's host key must be pinned: set host_key "
                             "(e.g. host_key = \"ssh-ed25519 AAAA...\") or known_hosts")
        return self

    def endpoint(self) -> SshEndpoint:
        return SshEndpoint(host=self.host, port=self.port, user=self.user,
                           key=str(Path(self.key).expanduser()), host_key=self.host_key,
                           known_hosts=str(Path(self.known_hosts).expanduser())
                           if self.known_hosts else None)


class LabgridSection(_Strict):
    env: str = Field(examples=["lab/env.yaml"], description="path of the labgrid env YAML")
    target: str = Field("main", examples=["main"], description="target (role) in the env YAML")
    coordinator: str | None = Field(None, examples=["127.0.0.1:20408"], description="coordinator "
                                    "HOST:PORT; else the env's options.coordinator_address, "
                                    "LG_COORDINATOR, or labgrid's default 127.0.0.1:20408")
    host_key: str | None = Field(None, examples=["ssh-ed25519 AAAA..."], description="the DUT's "
                                 "public host key, or a path to a .pub file: a NetworkService "
                                 "carries no host key, so it is pinned here")
    strategy_state: str | None = Field(None, examples=["shell"], description="Strategy state to "
                                       "transition to for flashing")
    # a fleet (lab/fleet.py): one of places, place_match, place_tags; the env's RemotePlace is a template
    places: list[str] | None = Field(None, examples=[["vlab-0", "vlab-1"]], description="a "
                                     "fleet: the names of its places (the env YAML's RemotePlace "
                                     "name is then a template, each lease names its place)")
    place_match: str | None = Field(None, examples=["vlab-*"], description="a fleet: an fnmatch "
                                    "pattern over the coordinator's place names")
    place_tags: dict[str, str] | None = Field(None, examples=[{"fleet": "vlab"}], description="a "
                                              "fleet: the places whose coordinator tags include "
                                              "all of these")
    place_profiles: dict[str, str] | None = Field(
        None, description="place -> that place's own lab profile (a vlab fleet: DUT paths differ per place)")

    @model_validator(mode="after")
    def _one_selector(self) -> LabgridSection:
        fleet_selector(self.places, self.place_match, self.place_tags)
        return self


class PlaceSection(_Strict):
    """The labgrid place this DUT is (a fleet place's own profile: `vlab up --places`, `qlab up
    --places`): every call that touches the DUT holds the place at the coordinator first."""

    name: str = Field(examples=["vlab-1"], description="the place's name at the coordinator")
    coordinator: str = Field(examples=["127.0.0.1:20408"], description="the coordinator HOST:PORT")


class DutPaths(_Strict):
    """Absolute paths on the DUT (on a real OpenWrt: /etc/config, /sys, /overlay ...)."""

    root: str | None = Field(None, description="vlab only: the DUT's state dir")
    rootfs: str = Field("/", examples=["/"], description="where the image's files land: each "
                        "[build] artifacts path is under it")
    overlay: str = Field("/overlay/upper", examples=["/overlay/upper"], description="the "
                         "writable overlay's upper dir: fingerprint_verify requires it empty "
                         "(nothing shadows the image)")
    config: str = Field("/etc/config", examples=["/etc/config"], description="the UCI config dir "
                        "(wireless, the levers' files, [load] router_config)")
    sysfs: str = Field("/sys", examples=["/sys"], description="sysfs root: the governor and boost "
                       "knobs are read and pinned under it")
    release: str = Field("/etc/openwrt_release", examples=["/etc/openwrt_release"],
                         description="release file shown by fingerprint_verify (never trusted)")
    tmp: str = Field("/tmp", examples=["/tmp"], description="where labwarden puts its files on "
                     "the DUT (helpers, perf data, uploaded images)")
    run: str = Field("/var/run", examples=["/var/run"], description="where the lease file "
                     "(labwarden.lease) lives")
    tracefs: str = Field("/sys/kernel/tracing", examples=["/sys/kernel/tracing"],
                         description="the mounted tracefs (uprobe counters)")


class DutSection(_Strict):
    backend: Literal["ssh", "labgrid"] = Field(examples=["ssh"], description="how the DUT is "
                                               "reached: `ssh` ([dut.ssh]) or `labgrid` "
                                               "([dut.labgrid])")
    ssh: SshSection | None = Field(None, description="the SSH endpoint (backend = \"ssh\")")
    labgrid: LabgridSection | None = Field(None, description="the labgrid target (backend = "
                                           "\"labgrid\")")
    place: PlaceSection | None = Field(None, description="the fleet place this DUT is")
    paths: DutPaths = Field(default_factory=DutPaths, description="absolute paths on the DUT")
    env: dict[str, str] = Field(
        default_factory=dict, examples=[{"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}],
        description="environment of every DUT command (channel and exec). Commands never run in "
        "a login shell, so /etc/profile does not set PATH: name here what the DUT needs")

    @model_validator(mode="after")
    def _env_names(self) -> DutSection:
        bad = [k for k in self.env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
        if bad:
            raise ValueError(f"env: {bad[0]!r} is not a shell variable name (e.g. PATH)")
        return self

    @model_validator(mode="after")
    def _backend_present(self) -> DutSection:
        if getattr(self, self.backend) is None:
            raise ValueError(f"backend = \"{self.backend}\" needs a [dut.{self.backend}] section")
        lg = self.labgrid
        if self.place is not None and self.backend == "labgrid" and lg is not None and (
                lg.places or lg.place_match or lg.place_tags):
            raise ValueError("[dut.place] names one place, and [dut.labgrid] selects a fleet: keep one")
        return self


class BuildSection(_Strict):
    kind: Literal["vlab", "command"] = Field("command", examples=["vlab"], description="`command` "
                                             "runs [build] command; `vlab` is the vlab's own "
                                             "firmware build")
    cc: str = Field("cc", description="C compiler for labwarden's DUT helpers (lw-pause): the "
                    "firmware's cross compiler on a real DUT", examples=["aarch64-linux-gnu-gcc"])
    strip: str = Field("strip", description="strip for the DUT's binaries (the build's images "
                       "and labwarden's helpers)", examples=["aarch64-linux-gnu-strip"])
    repo: str = Field(description="git repository of the firmware sources", examples=["~/src/fw"])
    builds: str = Field(description="where build outputs are kept", examples=["~/fw-builds"])
    command: list[str] = Field(description="argv run confined in a clean worktree; {out} (the "
                               "output dir, /build/out in the sandbox) {git_hash} {jobs} are "
                               "filled in", examples=[["make", "O={out}", "GIT_HASH={git_hash}"]])
    artifacts: dict[str, str] = Field(description="file the build command writes at the top of "
                                      "{out} -> its path inside the DUT rootfs ([dut.paths] "
                                      "rootfs): each is stripped into the image and "
                                      "fingerprinted on the DUT",
                                      examples=[{"libsta.so": "usr/lib/libsta.so"}])
    extra_outputs: list[str] = Field(default_factory=list, examples=[["stasim"]],
                                     description="files at the top of {out} kept beside the "
                                     "build but not deployed (a host-side load generator)")
    patches_dirs: list[str] = Field(default_factory=list, description="where patch ids are found",
                                    examples=[["~/fw-patches"]])
    baseline: str | None = Field(None, description="build id of the known-good image")
    timeout_s: float = Field(600, gt=0, le=86_400, examples=[600], description="how long one "
                             "build command may run (confined: lab/host/sandbox.py); then its "
                             "processes are killed")
    memory_mb: int = Field(4096, ge=256, examples=[4096], description="memory of a build as a "
                           "whole (every process together, its private /tmp's files included; "
                           "the kernel kills the build past it); was each process's address "
                           "space before builds had cgroups")
    max_procs: int = Field(1024, ge=64, le=65_536, examples=[1024], description="processes and "
                           "threads of a build as a whole (a fork past it is refused)")
    disk_mb: int = Field(8192, ge=64, examples=[8192], description="what a build's worktree "
                         "(/build/src) and output dir (/build/out) may hold together, and so its "
                         "largest file; the build is killed past it")
    tmp_mb: int = Field(1024, ge=16, examples=[1024], description="size of a build's private "
                        "/tmp (a tmpfs: its files count in memory_mb too)")
    log_mb: int = Field(64, ge=1, examples=[64], description="how much of a build's output "
                        "build.log keeps (the rest is dropped; the last 256 KiB are kept and "
                        "returned)")
    readonly_paths: list[str] = Field(default_factory=list, description="host paths a build may "
                                      "read besides /usr (a cross toolchain outside /usr: its "
                                      "bin/ goes on the build's PATH); the build sees nothing "
                                      "else of the host",
                                      examples=[["/opt/x-tools"]])
    protected: list[str] = Field(default_factory=list, description="globs of source paths a "
                                 "submitted patch may not touch: the monitor, the load side, "
                                 "measurement helpers (a patch must fix the daemon, not change "
                                 "the workload)", examples=[["stamon.c", "stasim.c", "measure.sh"]])
    protected_artifacts: list[str] = Field(default_factory=list, description="build outputs "
                                           "(artifacts or extra_outputs) whose code a patch may "
                                           "not change by any route -- a source, a header, a "
                                           "build rule: patch_submit refuses such a patch and an "
                                           "experiment is never kept when A's and B's differ",
                                           examples=[["stamon", "stasim", "stacli"]])


class _FlashBase(_Strict):
    timeout_s: float = Field(180, gt=0, examples=[180], description="how long the DUT may take to "
                             "install the image and come back")



class SysupgradeFlashSection(_FlashBase):
    """Upload the build's image to the DUT's tmp, run the DUT's own flash command on it, and wait
    for a new boot: the DUT's boot_id changes, SSH answers again, the target is a new instance."""

    kind: Literal["sysupgrade"] = Field("sysupgrade", description="the flash driver")
    command: list[str] = Field(default_factory=lambda: ["sysupgrade", "-n"],
                               description="argv run on the DUT; the image's path is appended",
                               examples=[["sysupgrade", "-n"]])


class VlabFlashSection(SysupgradeFlashSection):
    """The vlab's sysupgrade: as `sysupgrade`, but its reboot restarts processes, not the kernel
    (the boot id stays)."""

    # sysupgrade's section under its own tag in the [flash] union: the narrowed override is the point
    kind: Literal["vlab"] = Field("vlab", description="the flash driver")  # type: ignore[assignment]
    command: list[str] = Field(default_factory=lambda: ["sysupgrade"], examples=[["sysupgrade"]],
                               description="argv run on the DUT; the image's path is appended")


class CommandFlashSection(_FlashBase):
    """A host-side flasher (TFTP, a serial loader, a vendor tool): argv run on this host; then
    wait until SSH answers and the target is a new instance."""

    kind: Literal["command"] = Field("command", description="the flash driver")
    command: list[str] = Field(description="argv run on the host; {image} {host} {port} {user} "
                               "are filled in", examples=[["/opt/lab/flash.sh", "{image}", "{host}"]])


class LabgridFlashSection(_FlashBase):
    """The labgrid Strategy of the DUT's target moves to `state`, installing the build's image
    (given to the env as `images.<image_key>`) on the way; then wait for a new target instance."""

    kind: Literal["labgrid"] = Field("labgrid", description="the flash driver")
    state: str = Field("shell", description="Strategy state after flashing", examples=["shell"])
    image_key: str = Field("root", description="key in the env YAML's images: the strategy's "
                           "flasher reads it", examples=["root"])
    env: str | None = Field(None, description="labgrid env YAML (default: [dut.labgrid] env)")
    target: str | None = Field(None, description="target in it (default: [dut.labgrid] target, "
                               "else main)")


def _flash_kind(data: Any) -> Any:
    """`method = "..."` was the key before drivers had kinds (read as `kind`); no kind at all
    meant sysupgrade."""
    if isinstance(data, dict) and "kind" not in data:
        data = dict(data)
        data["kind"] = data.pop("method", "sysupgrade")
    return data


FlashSection = Annotated[SysupgradeFlashSection | VlabFlashSection | CommandFlashSection
                         | LabgridFlashSection,
                         Field(discriminator="kind"), BeforeValidator(_flash_kind)]
"""`[flash]`: one driver per kind (labwarden/lab/drivers/flash/)."""


class StasimLoadSection(_Strict):
    """The vlab's station simulator, run on this host against the DUT daemon's socket."""

    kind: Literal["stasim"] = Field(examples=["stasim"], description="the load driver")
    binary: str = Field(examples=["/opt/lab/stasim"], description="the station simulator on this "
                        "host")
    socket: str = Field(description="the DUT daemon's RPC socket", examples=["/var/run/stad.sock"])
    pidfile: str = Field(description="load generator pid file on the load host",
                         examples=["/var/lib/labwarden/stasim.pid"])
    log: str = Field(description="load generator log on the load host",
                     examples=["/var/lib/labwarden/stasim.log"])
    radios: int = Field(6, ge=1, le=64, examples=[6], description="radios the stations are "
                        "split over, round-robin")
    settle_s: float = Field(2.0, ge=0, le=60, examples=[2.0], description="seconds from "
                            "associating clients to the first window: at least one poll interval "
                            "of the monitor, so every client is in the steady polling cycle "
                            "(a sweep or measure call may override it)")


class NoLoadSection(_Strict):
    """A DUT with no clients to hold (a daemon that works on its own input): only `stations = 0`
    can be measured, and client-count gates are not applicable."""

    kind: Literal["none"] = Field("none", description="the load driver")
    radios: int = Field(1, ge=1, le=64, description="not used: there are no clients to split")
    settle_s: float = Field(0.0, ge=0, le=60, examples=[0.0], description="seconds before the "
                            "first window")


class CommandLoadSection(_Strict):
    """Your own load script, run on this host: `hold` with {n} sets the load to n clients and
    exits 0 once they are held (0 = none); the DUT's own count is `[readers] clients`."""

    kind: Literal["command"] = Field("command", description="the load driver")
    hold: list[str] = Field(description="argv on the load host; {n} is the number of clients",
                            examples=[["/opt/lab/clients.sh", "{n}"]])
    radios: int = Field(1, ge=1, le=64, examples=[2], description="radios (or ports) the clients "
                        "are split over")
    timeout_s: float = Field(120, gt=0, examples=[120], description="how long `hold` may take")
    settle_s: float = Field(2.0, ge=0, le=60, examples=[2.0], description="seconds from holding "
                            "the clients to the first window")


class WpaSupplicantLoadSection(_Strict):
    """Real 802.11 stations on the DUT itself (the qlab: wpa_supplicant on mac80211_hwsim client
    radios): `command` on the DUT with `assoc N TIMEOUT` holds stations 1..N round-robin over the
    enabled VAPs and verifies both sides (wpa_cli status and each AP's station dump), `release
    TIMEOUT` disassociates every station and checks their APs dropped them."""

    kind: Literal["wpa_supplicant"] = Field("wpa_supplicant", description="the load driver")
    command: list[str] = Field(default_factory=lambda: ["lw-sta"], examples=[["lw-sta"]],
                               description="argv on the DUT; `assoc N TIMEOUT_S` or "
                               "`release TIMEOUT_S` is appended")
    radios: int = Field(6, ge=1, le=64, examples=[6], description="AP radios the stations are "
                        "split over")
    timeout_s: float = Field(180, gt=0, le=1800, examples=[180], description="how long associating "
                             "(or releasing) may take on the DUT")
    settle_s: float = Field(2.0, ge=0, le=60, examples=[2.0], description="seconds from "
                            "associating to the first window")


class Iperf3LoadSection(_Strict):
    """Traffic through the DUT: an iperf3 client on one side of it and a server on the other,
    on load hosts outside the DUT's CPU. `client` and `server` are argv prefixes that run a
    command on each side: the qlab's host netns (`["ip", "netns", "exec", "lwlan"]`), or your own
    bench's load hosts over SSH (`["ssh", "-o", "BatchMode=yes", "root@10.0.0.2"]`). Holding N
    clients runs N parallel TCP streams until released; `traffic_sweep` and `saturate` run
    measured windows of their own."""

    kind: Literal["iperf3"] = Field("iperf3", description="the load driver")
    client: list[str] = Field(min_length=1, examples=[["ip", "netns", "exec", "lwlan"]],
                              description="argv prefix that runs iperf3 on the client (lan) side")
    server: list[str] = Field(min_length=1, examples=[["ip", "netns", "exec", "lwwan"]],
                              description="argv prefix that runs iperf3 on the server (wan) side")
    server_addr: str = Field(pattern=r"^[0-9A-Za-z.:-]+$", examples=["192.168.60.2"],
                             description="the server's address as the client reaches it (through the DUT)")
    port: int = Field(5201, ge=1024, le=65535, description="iperf3's control/data port")
    iperf3: str = Field("iperf3", pattern=r"^[A-Za-z0-9_./-]+$",
                        description="the iperf3 binary on both load hosts")
    radios: int = Field(1, ge=1, le=64, description="not used: traffic has no radios to split over")
    timeout_s: float = Field(30, gt=0, le=600, description="beyond a window's length: how long "
                             "starting and ending a window may take")
    settle_s: float = Field(1.0, ge=0, le=60, examples=[1.0], description="seconds from "
                            "starting the streams to the first window")
    router_config: str | None = Field(None, pattern=r"^[A-Za-z0-9_-]+$", examples=["firewall"],
                                      description="the DUT's UCI file (under [dut.paths] config) "
                                      "with the forward rule set: `router_rules` writes its "
                                      "`rules`, `mode` and `wireguard` options (None: not a changeable DUT)")
    router_reload: list[str] = Field(default_factory=list, examples=[["lw-route", "reload"]],
                                     description="argv on the DUT that applies router_config and "
                                     "prints its state (`rules=N mode=M ...`)")


LoadSection = Annotated[StasimLoadSection | NoLoadSection | CommandLoadSection | WpaSupplicantLoadSection
                        | Iperf3LoadSection,
                        Field(discriminator="kind")]
"""`[load]`: one driver per kind (labwarden/lab/drivers/load/)."""


class ReadersSection(_Strict):
    """Optional readers of what the DUT itself says. A reader that is not declared makes its
    evidence not applicable (never made up)."""

    clients: list[str] | None = Field(
        None, description="argv on the DUT printing its client count: `total=N [name=N ...]` or "
        "`N` (the datamodel count associate, sweeps and the gates check against)",
        examples=[["stacli", "--socket", "/var/run/stad.sock", "count"]])


class TargetSection(_Strict):
    process: str = Field(examples=["stad"], description="the process measured on the DUT (its "
                         "name)")
    library: str | None = Field(None, description="DUT path of the library holding the probed "
                                "functions (default: the target's own executable)",
                                examples=["/usr/lib/libsta.so"])
    suspects: list[str] = Field(default_factory=list, examples=[["stamon"]], description="the "
                                "only processes `attribute` may pause (SIGSTOP, resumed by a "
                                "DUT-side dead-man)")
    uprobes: dict[str, str] = Field(
        default_factory=dict, description="counter -> function, or `/dut/path/of/binary:function` "
        "(any symbol the build's symbols know, exported or not)",
        examples=[{"rpc_calls": "getStationStats"}])
    rpc_client: str | None = Field(None, description="(older profiles) DUT command whose `--socket "
                                   "S count` counts the stasim load's clients: use [readers] "
                                   "clients instead")
    prints_git_hash: bool = Field(False, examples=[True], description="`PROCESS --version` "
                                  "prints the git hash it was built from (the 40-hex hash or an "
                                  "abbreviation of at least 7): fingerprint_verify then checks it "
                                  "too. Off (the default), the proof is the running binaries "
                                  "themselves: sha256 and ELF build-id of each artifact, read on "
                                  "the DUT; `--version` is never run (a daemon without the "
                                  "option might start a second instance)")
    perf: str = Field("perf", description="perf on the DUT", examples=["/usr/bin/perf"])
    pidfiles: dict[str, str] = Field(default_factory=dict, description="process name -> DUT pid "
                                     "file; without one, the process is found by name",
                                     examples=[{"stad": "/var/run/stad.pid"}])
    cpu_clock: Literal["auto", "ticks"] = Field(
        "auto", examples=["ticks"], description="the clock of the target's CPU figures. auto: "
        "nanosecond run time from /proc/PID/task/*/schedstat where the DUT has it, else ticks; "
        "ticks: utime+stime only (in CLK_TCK ticks, as before the finer clock: a bench that "
        "compares against figures of that rule)")

    def pidfile(self, name: str) -> str | None:
        return self.pidfiles.get(name)


class TopologySection(_Strict):
    """The radio topology every measurement needs (the WiFi-daemon field study: 6 radios, channels
    pinned); read
    from the DUT's UCI `wireless`. Without this section the topology is not applicable."""

    kind: Literal["uci_wireless"] = Field("uci_wireless", examples=["uci_wireless"],
                                          description="read from the UCI `wireless` file")
    vaps: list[str] = Field(description="wifi-iface sections that must be enabled",
                            examples=[["vap0", "vap1"]])
    channels: dict[str, str] = Field(description="radio -> pinned channel", examples=[{"radio0": "36"}])
    reload: list[str] = Field(default_factory=lambda: ["wifi", "reload"],
                              description="argv that applies a wireless config change",
                              examples=[["wifi", "reload"]])


class LeversSection(_Strict):
    """Config levers a patch may need (the WiFi-daemon field study: the trace short-circuit
    only works with the trace zones lowered 400 -> 200; the lean RPC only matters when the monitor
    polls it)."""

    trace_config: str | None = Field(None, description="UCI file of the trace zones", examples=["trace"])
    trace_reload: list[str] = Field(default_factory=list, examples=[["service", "stad", "restart"]],
                                    description="argv on the DUT that applies a trace change")
    monitor_config: str | None = Field(None, description="UCI file of the monitor", examples=["stamon"])
    monitor_reload: list[str] = Field(default_factory=list, examples=[["service", "stamon", "restart"]],
                                      description="argv on the DUT that applies a monitor change")


class GatesSection(_Strict):
    """Gate thresholds, and what the lab declares its evidence to be."""

    load_drives_cpu: bool = Field(False, examples=[True], description="the target's CPU rises "
                                  "with the workload points (a WiFi daemon's CPU with its "
                                  "stations): only then does the cpu_monotonic gate apply")
    unknown_frames_pct_max: float = Field(1.0, ge=0, le=100, examples=[1.0], description="the "
                                          "unknown_frames gate: most % of perf samples left "
                                          "without a symbol")
    rss_per_client_kb_max: float = Field(64.0, gt=0, examples=[64.0], description="the "
                                         "rss_bounded gate: most RSS growth per client, KiB")


class DecisionSection(DecisionRule):
    """How an experiment decides, fixed before any data is seen (pre-registered): the rule
    (alpha, the smallest effect worth keeping, windows), what is measured, and the two parity
    gates (offered load, functional output)."""

    window_s: float = Field(4.0, ge=2, le=300, examples=[4.0], description="seconds per window")
    settle_s: float = Field(3.0, ge=0, le=60, examples=[3.0], description="seconds from "
                            "associating to the first window of an A/B segment or sweep point: a "
                            "few monitor cycles, so every client's first sync (a full write-back "
                            "even where a patch gates it) is behind the window")
    densities: list[int] | None = Field(None, min_length=1, max_length=12,
                                        examples=[[18, 60, 114]], description="the workload "
                                        "points (clients, streams) of the full sweep of a "
                                        "candidate that survives screening; screening runs at "
                                        "the last (densest). Not declared: the load's own "
                                        "([load] kind: 18/60/114 clients for stations, 1/4/8 "
                                        "iperf3 streams, 0 for a load of kind none)")
    sweep_reps: int = Field(3, ge=1, le=10, examples=[3], description="windows per density of "
                            "the full sweep")
    interleave: bool | Literal["auto"] = Field(
        "auto", examples=["auto"], description="alternate A and B in rounds (a flash per round: "
        "round_windows), analysed blocked by round so drift cancels; false: A once at "
        "max_windows, B adding windows against it, A again after B (drift_check). auto: "
        "interleave when one switch of image (flash + fingerprint verify, as last measured on "
        "this lab) costs no more than the windows a round adds (pairs: one window_s; look "
        "rounds: step_windows x window_s; plus settle_s); not yet measured: false")
    drift_check: bool = Field(True, examples=[True], description="without interleaving, measure "
                              "A again (min_windows) after B decided (A-B-A): when the two A's "
                              "differ (the rule's interval excludes 0 and the change is beyond "
                              "the band) the verdict is 'unknown: the lab moved'")
    environment_shift_pp: float = Field(
        40.0, gt=0, examples=[40.0], description="what else ran on the DUT (its CPU outside the "
        "target, % of one core) may differ by at most this between a round's A and B windows, "
        "and between a window and its block's median; beyond it the round or window is "
        "flagged, or left out of the verdict (environment_others_action), and the screening "
        "says so")
    environment_others_action: Literal["drop", "flag"] = Field(
        "flag", examples=["flag"], description="what environment_shift_pp does to a round or "
        "window beside moved other work when environment_action is drop: flag (keep it, say so) "
        "or drop it like a starved target. flag by default: other work the target does not "
        "feel is noise the design cancels, and dropping it cost lab time for nothing -- on the "
        "vlab's drift bench a CPU hog beside stad left 192 of 342 windows out while stad's "
        "wait stayed under 2% and its CPU moved a few %, in no single direction")
    environment_wait_pp: float = Field(
        10.0, gt=0, examples=[10.0], description="the target's own wait for a CPU (run-queue "
        "delay, % of one core) may differ by at most this between a round's A and B windows, and "
        "between a window and its block's median: a target starved in one arm only (a hog beside "
        "it, a saturated host) is left out like a moved environment")
    reuse_a_max_age_s: float = Field(
        3600.0, ge=0, examples=[3600.0], description="without interleaving: A's windows from an "
        "earlier screening of the same build on the same place, taken with these settings "
        "(window_s, workload point, metric) no longer than this ago, stand in for A after a "
        "check of min_windows windows agrees with them (else A is measured anew); bisect keeps "
        "good's windows the same way. A's full sweep (a survivor's) is reused no longer than "
        "this either. 0: A is always measured anew")
    environment_action: Literal["drop", "flag", "off"] = Field(
        "drop", examples=["drop"], description="drop: leave a moved round or window out of the "
        "verdict (other work: as environment_others_action says) and take a replacement before "
        "the look counts (the cap counts kept windows; at "
        "most max_windows / 2 replacements per arm); without interleaving, a moved B makes the "
        "verdict unknown; flag: keep it and say so; off: no environment rule")
    offered_load_counter: str | None = Field(None, examples=["rpc_calls"], description="the "
                                             "uprobe counter ([target] uprobes) that measures the "
                                             "offered load (on the vlab, the monitor's RPC calls/s)")
    offered_load_tolerance_pct: float = Field(5.0, gt=0, le=100, examples=[5.0],
                                              description="B's offered load may fall at most "
                                              "this far below A's (mean of per-window rates; never "
                                              "finer than one call a window, nor than two standard "
                                              "errors of the difference from A's scatter per "
                                              "window); more load on B passes")
    parity_check: list[str] = Field(default_factory=list, examples=[["sh", "-c", "..."]],
                                    description="argv run on the DUT with the densest clients "
                                    "held; its output must be equal for A and B (functional "
                                    "parity). Empty: none declared")

    @model_validator(mode="after")
    def _ascending(self) -> DecisionSection:
        d = self.densities
        if d is not None and (d != sorted(set(d)) or d[0] < 0):
            raise ValueError("decision.densities must be distinct, >= 0 and ascending, e.g. "
                             "[18, 60, 114] (or [0] for a load of kind none)")
        return self


HealKind = Literal["governor", "boost", "topology", "procmgr", "trace_zones"]


class BudgetSection(_Strict):
    tokens: int | None = Field(None, gt=0, description="model tokens per session", examples=[2_000_000])
    dollars: float | None = Field(None, gt=0, examples=[25.0], description="model dollars per "
                                  "session")
    wall_time_s: float | None = Field(None, gt=0, examples=[28_800], description="seconds per "
                                      "session: a call that would cross it is stopped")
    tool_calls: int | None = Field(None, gt=0, examples=[500], description="tool calls per "
                                   "session (refused and malformed ones count)")
    flashes_per_hour: int | None = Field(6, gt=0, examples=[6], description="flashes per DUT "
                                         "per hour, across every session and process (none by "
                                         "default on a vlab)")


class PolicySection(_Strict):
    heal: list[HealKind] = Field(default_factory=list, examples=[["governor", "boost"]],
                                 description="what the guard may set right before a call (each "
                                 "change recorded); anything else unready is refused")
    budgets: BudgetSection = Field(default_factory=BudgetSection, description="limits per "
                                   "session (flashes: per DUT)")
    lease_ttl_s: float = Field(300, gt=0, le=86_400, examples=[300], description="seconds a "
                               "lease on the DUT lasts unless renewed (it is renewed while a "
                               "call runs)")
    transcript_fsync: Literal["changes", "every_call"] = Field(
        "changes", examples=["changes"],
        description="when a tool call's transcript commit waits for fsync: `changes` for calls "
        "that change the DUT (and heals, and a board turning bad), `every_call` for all. Every "
        "event is committed before its call returns either way (it survives kill -9); `changes` "
        "lets a power cut lose read-only events after the last change")


class LabProfile(_Strict):
    lab: LabSection
    dut: DutSection
    build: BuildSection
    flash: FlashSection = Field(default_factory=SysupgradeFlashSection)
    load: LoadSection = Field(default_factory=NoLoadSection)
    target: TargetSection
    topology: TopologySection | None = None
    readers: ReadersSection = Field(default_factory=ReadersSection)
    levers: LeversSection = Field(default_factory=LeversSection)
    gates: GatesSection = Field(default_factory=GatesSection)
    decision: DecisionSection = Field(default_factory=DecisionSection)
    policy: PolicySection = Field(default_factory=PolicySection)

    source: str | None = Field(None, exclude=True, description="set by labwarden to the file the "
                               "profile was read from (a value written in the file is replaced)")

    @model_validator(mode="after")
    def _points_fit_the_load(self) -> LabProfile:
        d = self.decision.densities
        if self.load.kind == "none" and d is not None and d != [0]:
            raise ValueError(f"decision.densities: {d} needs a load that holds clients, and "
                             "[load] kind = \"none\" holds none: leave densities out (the one "
                             "point is 0) or give [load] a kind with clients")
        return self

    @model_validator(mode="after")
    def _vlab_flashes(self) -> LabProfile:
        # a vlab flash restarts two processes and wears nothing: unless the profile sets one, a
        # vlab has no flash budget (an experiment alternates A and B)
        if self.lab.kind == "vlab" and "flashes_per_hour" not in self.policy.budgets.model_fields_set:
            self.policy.budgets.flashes_per_hour = None
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> LabProfile:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ProfileError(path, [f"no such file: {path}"],
                               "create one with `labwarden vlab up` (writes .vlab/lab.toml) "
                               "or copy examples/lab.toml") from None
        except tomllib.TOMLDecodeError as exc:
            raise ProfileError(path, [f"not valid TOML: {exc}"], "fix the syntax at that line") \
                from None
        return cls.from_dict(data, path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: str | Path = "<profile>") -> LabProfile:
        try:
            prof = cls.model_validate(data)
        except ValidationError as exc:
            raise ProfileError(path, [_explain(err) for err in exc.errors()],
                               "fix the keys above; `labwarden lab schema` prints every key "
                               "with its type, default and example (an editor reads it: "
                               "schema/lab.schema.json), and `labwarden lab check PROFILE` "
                               "checks a profile and its DUT") from None
        prof.source = str(path)
        return prof

    def data_dir(self) -> Path:
        """The lab's data dir, absolute (a relative [lab] data_dir is relative to this profile's
        directory): the root every stored identifier resolves under."""
        base = Path(self.source).parent if self.source and self.source != "<profile>" else Path.cwd()
        path = Path(self.lab.data_dir).expanduser() if self.lab.data_dir else Path("labwarden-data")
        return (path if path.is_absolute() else base / path).absolute()

    def patch_roots(self) -> list[Path]:
        """Where patch ids and patch paths may point: [build] patches_dirs (relative ones against
        this profile's directory) and the data dir's patches/ (submitted patches). The guard and
        the builder both use this list: one set of roots for one kind of identifier."""
        base = Path(self.source).parent if self.source and self.source != "<profile>" else None
        roots = []
        for d in self.build.patches_dirs:
            p = Path(d).expanduser()
            roots.append(p if p.is_absolute() or base is None else base / p)
        return [*roots, self.data_dir() / "patches"]

    def clients_reader(self) -> list[str] | None:
        """The DUT argv that counts its clients, or None (not applicable on this DUT)."""
        if self.readers.clients:
            return list(self.readers.clients)
        if self.target.rpc_client and isinstance(self.load, StasimLoadSection):  # older vlab profiles
            return [self.target.rpc_client, "--socket", self.load.socket, "count"]
        return None

    def ssh_endpoint(self) -> SshEndpoint:
        """The SSH endpoint for the ssh backend (the labgrid backend resolves its own)."""
        if self.dut.ssh is None:
            raise ProfileError(self.source or "<profile>", ["dut.ssh is not set"],
                               "use the labgrid backend's resolver")
        return self.dut.ssh.endpoint()


class ProfileError(LabError):
    """A lab profile that cannot be used: every problem names its key."""

    kind = "invalid_input"

    def __init__(self, path: str | Path, problems: list[str], remedy: str):
        self.path = str(path)
        self.problems = problems
        super().__init__(f"invalid lab profile {path}:\n  - " + "\n  - ".join(problems), remedy)


def _example(loc: tuple[int | str, ...]) -> str | None:
    """Walk the models along an error location to the field's documented example."""
    model: Any = LabProfile
    field = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(part, str) or not fields or part not in fields:
            return None
        field = fields[part]
        ann = field.annotation
        model = next((a for a in getattr(ann, "__args__", (ann,)) if hasattr(a, "model_fields")),
                     None)
    if field is None or not field.examples:
        return None
    import json

    return f"{loc[-1]} = {json.dumps(field.examples[0])}"


_KINDS = {"load": ("stasim", "none", "command", "wpa_supplicant", "iperf3"),
          "flash": ("sysupgrade", "vlab", "command", "labgrid")}
"""Sections that are a union on `kind` (pydantic puts the kind into an error's location)."""


def _explain(err: Any) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if loc and loc[0] in _KINDS:
        kinds = _KINDS[str(loc[0])]
        if kind == "union_tag_not_found":
            return f"{loc[0]}.kind: required key is missing (one of {', '.join(kinds)})"
        if kind == "union_tag_invalid":
            return f"{loc[0]}.kind: {err['input'].get('kind')!r} is not a kind (one of " \
                   f"{', '.join(kinds)})"
        if len(loc) > 1 and loc[1] in kinds:
            loc = (loc[0], *loc[2:])
    key = ".".join(str(p) for p in loc) or "(top level)"
    if kind == "extra_forbidden":
        return f"{key}: unknown key (misspelt? it would be ignored, so it is refused)"
    if kind == "missing":
        ex = _example(loc)
        return f"{key}: required key is missing" + (f" (e.g. {ex})" if ex else "")
    got = err.get("input")
    ex = _example(loc)
    got_s = repr(got) if not isinstance(got, dict) else "a table"
    return f"{key}: {err['msg']}, got {got_s}" + (f" (e.g. {ex})" if ex else "")
