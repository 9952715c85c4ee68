"""`labwarden ...`: the typer app. Each command lives in the module named after it (one module per
command group); this file only puts them together -- lazily (cli/lazy.py): a command's module is
imported when it runs, so `labwarden version` or `--help` pays for no lab, model or MCP code."""

from __future__ import annotations

import gc
from typing import ClassVar

import typer

from labwarden import __version__
from labwarden.cli.lazy import Lazy, LazyGroup


class Root(LazyGroup):
    """The commands, in the order --help lists them."""

    lazy: ClassVar[dict[str, Lazy]] = {
        "serve": Lazy("labwarden.cli.serve:serve", "Serve every lab tool, resource and prompt over "
                      "MCP; every call is guarded and logged."),
        "run": Lazy("labwarden.cli.run:run_cmd", "Run a playbook: a deterministic sequence of tool "
                    "calls (no model) through the same guard and transcript as any agent."),
        "chat": Lazy("labwarden.cli.agent:chat", "Talk to a Claude model that has the lab's tools "
                     "(ANTHROPIC_API_KEY; every call logged and priced)."),
        "loop": Lazy("labwarden.cli.agent:loop", "Run the unattended patch-measure loop to a goal, "
                     "within a budget and a deadline."),
        "version": Lazy("labwarden.cli.app:version", "Print labwarden's version."),
        "doctor": Lazy("labwarden.cli.doctor:doctor", "Check perf, perf_event_paranoid, "
                       "tracefs/uprobes, inferno, cargo, gcc; name each remedy."),
        "demo": Lazy("labwarden.cli.run:demo", "Tell the WiFi-daemon field study's story on a lab "
                     "brought up and down around it: the vlab (default) or the qlab."),
        "report": Lazy("labwarden.cli.report:report", "Write a report of one session, several, "
                       "or every session of the lab (--all) as one self-contained HTML file and "
                       "print its path."),
        "vlab": Lazy("labwarden.cli.vlab:app", "The virtual lab: a DUT of real processes, perf and "
                     "SSH on loopback."),
        "qlab": Lazy("labwarden.cli.qlab:app", "The qlab: a real-kernel DUT under QEMU (labgrid), "
                     "mac80211_hwsim radios, hostapd APs, wpa_supplicant clients."),
        "call": Lazy("labwarden.cli.call:app", "Call one lab tool with JSON arguments (see "
                     "`labwarden call TOOL --help`)."),
        "lab": Lazy("labwarden.cli.lab:app", "Lab administration by a person: check a profile "
                    "and its DUT, write a starting profile, the profile's schema, board health, a "
                    "fleet's place health."),
        "transcripts": Lazy("labwarden.cli.transcripts:app", "Transcripts: every session's tool "
                            "calls, guard decisions, model calls and costs, hash-chained."),
    }


app = typer.Typer(cls=Root, no_args_is_help=True)


@app.callback()
def main() -> None:
    """labwarden: run a performance lab through guarded, audited tools."""


def version() -> None:
    """Print labwarden's version."""
    print(__version__)


def run() -> None:
    """The `labwarden` command: the app, then an exit that skips the final garbage collection.
    Interpreter shutdown collects every object a command created -- ~0.1 s after a tool call,
    for nothing that matters once the command is done (connections and files are closed by then,
    atexit handlers still run): gc.freeze() moves them out of its reach."""
    try:
        app()
    finally:
        gc.freeze()


if __name__ == "__main__":
    run()
