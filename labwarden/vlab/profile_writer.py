"""Write the lab profile (lab.toml) of a vlab: a real lab differs only in this file."""

from __future__ import annotations

import json

from labwarden.lab import uci
from labwarden.vlab import firmware, tuning
from labwarden.vlab.layout import SERVICES, VlabLayout


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def write(layout: VlabLayout, info_port: int, manifest: firmware.BuildManifest) -> None:
    r = layout.root
    factory = uci.load(tuning.factory_config_dir() / "wireless")
    vaps = [s.name for s in factory if s.type == "wifi-iface"]
    channels = {s.name: s.options["channel"] for s in factory if s.type == "wifi-device"}
    with open(str(layout.host_key) + ".pub") as f:
        host_key_line = f.read().strip()
    text = f"""# labwarden lab profile for the virtual lab in {r}
# Written by `labwarden vlab up`; a real lab differs only in this file.

[lab]
name = "vlab"
kind = "vlab"
data_dir = {_q(str(layout.data_dir))}

[dut]
backend = "ssh"
# every DUT command gets this environment (no login shell runs, so nothing else sets PATH)
env = {{ {", ".join(f"{k} = {_q(v)}" for k, v in layout.dut_env().items() if k != "HOME")} }}

[dut.ssh]
host = "127.0.0.1"
port = {info_port}
user = "root"
key = {_q(str(layout.client_key))}
host_key = {_q(host_key_line)}

[dut.paths]
root = {_q(str(r))}
rootfs = {_q(str(layout.rootfs))}
overlay = {_q(str(layout.overlay))}
config = {_q(str(layout.config_dir))}
sysfs = {_q(str(layout.sysfs))}
release = {_q(str(layout.openwrt_release))}
tmp = {_q(str(layout.tmp_dir))}
run = {_q(str(layout.run_dir))}

[build]
kind = "vlab"
repo = {_q(str(layout.src))}
builds = {_q(str(layout.builds))}
command = {json.dumps(firmware.COMMAND)}
artifacts = {{ {", ".join(f"{_q(k)} = {_q(v)}" for k, v in firmware.DEPLOY.items())} }}
extra_outputs = {json.dumps(firmware.LOADGEN)}
patches_dirs = {json.dumps([str(d) for d in firmware.patches_dirs(layout)])}
baseline = {_q(manifest.build_id)}

[flash]
kind = "vlab"
command = ["sysupgrade"]
timeout_s = 60

[load]
kind = "stasim"
binary = {_q(str(layout.loadgen / "stasim"))}
socket = {_q(str(layout.socket))}
pidfile = {_q(str(layout.stasim_pid))}
log = {_q(str(layout.logs / "stasim.log"))}
radios = 6
# stamon polls every 1 s (interval_ms in its uci config): one interval puts every new client
# in the steady cycle (measured: the first 1 s sample after associating is ~30% low, not after)
settle_s = 1.0

[target]
process = "stad"
library = {_q(str(layout.rootfs / "usr" / "lib" / "libsta.so"))}
suspects = ["stamon"]
uprobes = {{ rpc_calls = "getStationStats", dm_write_txns = "dm_finalize_transaction" }}
pidfiles = {{ {", ".join(f"{n} = {_q(str(layout.run_dir / (n + '.pid')))}" for n in SERVICES)} }}

[readers]
clients = ["stacli", "--socket", {_q(str(layout.socket))}, "count"]

[topology]
vaps = {json.dumps(vaps)}
channels = {{ {", ".join(f"{k} = {_q(v)}" for k, v in channels.items())} }}
reload = ["service", "stad", "restart"]

[levers]
trace_config = "trace"
trace_reload = ["service", "stad", "restart"]
monitor_config = "stamon"
monitor_reload = ["service", "stamon", "restart"]

[gates]
unknown_frames_pct_max = 1.0
rss_per_client_kb_max = 64.0

[policy]
heal = ["governor", "boost", "topology", "procmgr"]
"""
    layout.lab_toml.write_text(text)
