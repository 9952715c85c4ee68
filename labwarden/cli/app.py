"""`labwarden ...`: the typer app. Each command lives in the module named after it (one module per
command group); this file only puts them together."""

from __future__ import annotations

import typer

from labwarden import __version__
from labwarden.cli import agent, call, doctor, lab, qlab, report, run, serve, transcripts, vlab
from labwarden.cli.common import out

app = typer.Typer(help="labwarden: run a performance lab through guarded, audited tools.",
                  no_args_is_help=True)


def version() -> None:
    """Print labwarden's version."""
    out.print(__version__)


app.command("serve")(serve.serve)
app.command("run")(run.run_cmd)
app.command("chat")(agent.chat)
app.command("loop")(agent.loop)
app.command("version")(version)
app.command("doctor")(doctor.doctor)
app.command("demo")(run.demo)
app.command("report")(report.report)
app.add_typer(vlab.app, name="vlab")
app.add_typer(qlab.app, name="qlab")
app.add_typer(call.app, name="call")
app.add_typer(lab.app, name="lab")
app.add_typer(transcripts.app, name="transcripts")

if __name__ == "__main__":
    app()
