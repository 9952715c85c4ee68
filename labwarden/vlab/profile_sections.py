"""The lab-profile sections of the seed's WiFi firmware (stad, stamon, libsta), wherever it runs:
`vlab up` and `qlab up` write the same [target], [topology], [levers] and [gates] around paths of
their own (vlab/profile_writer.py, qlab/profile_writer.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from labwarden.lab import uci


def q(value: str) -> str:
    """A TOML basic string: a JSON string is one."""
    return json.dumps(value)


def table(pairs: dict[str, str]) -> str:
    """An inline TOML table of strings; a key that is not a bare key (`libsta.so`) is quoted."""
    return "{ " + ", ".join(f"{k if re.fullmatch(r'[A-Za-z0-9_-]+', k) else q(k)} = {q(v)}"
                            for k, v in pairs.items()) + " }"


def lab_section(name: str, kind: str, data_dir: Path) -> str:
    return f'[lab]\nname = "{name}"\nkind = "{kind}"\ndata_dir = {q(str(data_dir))}\n'


def target_section(library: str, pidfiles: dict[str, str], perf: str | None = None) -> str:
    """stad measured, stamon the suspect, the RPC and the datamodel's transactions counted."""
    return f"""[target]
process = "stad"
prints_git_hash = true                 # `stad --version` prints its commit: fingerprint_verify checks it
library = {q(library)}
suspects = ["stamon"]
uprobes = {{ rpc_calls = "getStationStats", dm_write_txns = "dm_finalize_transaction" }}
{"" if perf is None else f"perf = {q(perf)}{chr(10)}"}pidfiles = {table(pidfiles)}
"""


def topology_section(factory_wireless: Path, reload: list[str]) -> str:
    """The VAPs and channels of the firmware's factory wireless config (what heals restore)."""
    factory = uci.load(factory_wireless)
    vaps = [s.name for s in factory if s.type == "wifi-iface"]
    channels = {s.name: s.options["channel"] for s in factory if s.type == "wifi-device"}
    return (f"[topology]\nvaps = {json.dumps(vaps)}\nchannels = {table(channels)}\n"
            f"reload = {json.dumps(reload)}\n")


LEVERS = """[levers]
trace_config = "trace"
trace_reload = ["service", "stad", "restart"]
monitor_config = "stamon"
monitor_reload = ["service", "stamon", "restart"]
"""

DRIVES_CPU = ("load_drives_cpu = true                 # the daemon's CPU rises with its stations: "
              "cpu_monotonic applies")


def gates_section(drives: str = DRIVES_CPU) -> str:
    return (f"[gates]\n{drives}\nunknown_frames_pct_max = 1.0\nrss_per_client_kb_max = 64.0\n")
