"""What every tool returns, as models: one module per tool (named as its module in tools/), below
tools/ so that report/, the loop's summary and the playbook runner read a call's result as its
model, not as a dict re-read by the tool's name.

A result comes back from the transcript as JSON (`ToolCallRecord.result`); `output_of` turns it
into its tool's model, in this one place. The mapping is lazy, as the registry's is: a tool's
result module is imported the first time a result of that tool is read.
"""

from __future__ import annotations

import importlib

from pydantic import BaseModel, ValidationError

from labwarden.core.call import ToolCallRecord
from labwarden.core.errors import LabError

_OUTPUTS: dict[str, tuple[str, str]] = {
    "lab_status": ("lab_status", "LabStatusOutput"),
    "env_pin": ("env_pin", "EnvPinOutput"),
    "build": ("build", "BuildOutput"),
    "flash": ("flash", "FlashOutput"),
    "fingerprint_verify": ("fingerprint", "FingerprintOutput"),
    "associate": ("associate", "AssociateOutput"),
    "measure": ("measure", "MeasureOutput"),
    "sweep": ("sweep", "SweepOutput"),
    "traffic_sweep": ("traffic_sweep", "TrafficSweepOutput"),
    "saturate": ("saturate", "SaturateOutput"),
    "router_rules": ("router_rules", "RouterRulesOutput"),
    "compare": ("compare", "CompareOutput"),
    "gate_check": ("gate_check", "GateOutput"),
    "attribute": ("attribute", "AttributeOutput"),
    "symbolize": ("symbolize", "SymbolizeOutput"),
    "report": ("report", "ReportOutput"),
    "source_search": ("source_search", "SourceSearchOutput"),
    "source_read": ("source_read", "SourceReadOutput"),
    "patch_submit": ("patch_submit", "PatchSubmitOutput"),
    "calibrate": ("calibrate", "CalibrateOutput"),
    "experiment": ("experiment", "ExperimentOutput"),
    "bisect": ("bisect", "BisectOutput"),
}
"""Tool name -> (module under labwarden/results, its output model). tests/test_results.py checks
that each is the `output` of the registry's spec of that name."""

_added: dict[str, type[BaseModel]] = {}
"""Output models of tools registered at run time (tools/registry.register)."""


_RENAMED = {"profile": "measure"}
"""Old tool name -> its name now: a transcript written before the rename names the old one, and
its results read as the renamed tool's (same JSON)."""


def model_of(tool: str) -> type[BaseModel] | None:
    """The output model of `tool` (or of the tool it was renamed to); None for a tool this
    labwarden does not know."""
    if tool in _added:
        return _added[tool]
    where = _OUTPUTS.get(_RENAMED.get(tool, tool))
    if where is None:
        return None
    model: type[BaseModel] = getattr(importlib.import_module(f"labwarden.results.{where[0]}"),
                                     where[1])
    return model


def register(tool: str, model: type[BaseModel]) -> None:
    """The output model of a tool added at run time (a plugin, a test's throwaway tool)."""
    _added[tool] = model


def unregister(tool: str) -> None:
    _added.pop(tool, None)


class UnreadableResult(LabError):
    """A stored result that does not read as its tool's model in this labwarden."""

    kind = "tool"


def output_of(record: ToolCallRecord) -> BaseModel | None:
    """The call's result as its tool's output model: the model itself for a call made in this
    process, else its JSON validated. None for a call that failed or a tool without a known
    model; UnreadableResult for a result this labwarden's model cannot read (a transcript
    written by another version: the reader leaves it out and says so)."""
    if not record.ok or record.result is None:
        return None
    model = model_of(record.tool)
    if model is None:
        return None
    if isinstance(record.output, model):
        return record.output
    try:
        return model.model_validate(record.result)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(result)"
        raise UnreadableResult(
            f"{record.tool} call {record.id}: its result does not read as this labwarden's "
            f"{model.__name__} ({where}: {first['msg']})",
            "read the session with the labwarden version that wrote it (its session_started "
            "event names it: `labwarden transcripts replay SESSION`)") from None
