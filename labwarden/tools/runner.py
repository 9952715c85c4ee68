"""Call a registered tool by name with JSON-like args: validate, run, time, and make the record.

This is the single path for every door (Python, CLI, MCP, playbooks); the guard and the
transcript attach here, so nobody has to remember to check or log.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import ValidationError

from labwarden.lab.builder import BuildError
from labwarden.tools import registry
from labwarden.tools.context import LabContext
from labwarden.tools.errors import ToolError
from labwarden.tools.record import ToolCallRecord, ToolFailure


def _invalid(exc: ValidationError) -> ToolFailure:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        problems.append(f"{key}: {err['msg']}")
    return ToolFailure(kind="invalid_input", message="; ".join(problems),
                       remedy="see the tool's input schema (`labwarden call TOOL --help`)")


async def call_tool(ctx: LabContext, name: str, args: dict[str, Any]) -> ToolCallRecord:
    spec = registry.get(name)
    record = ToolCallRecord(tool=name, args=args)
    t0 = time.monotonic()
    mark = len(ctx.messages)
    try:
        inp = spec.input.model_validate(args)
        record.args = inp.model_dump(mode="json")
        out = await spec.run(ctx, inp)
        record.result = out.model_dump(mode="json")
        record.ok = True
    except ValidationError as exc:
        record.error = _invalid(exc)
    except ToolError as exc:
        record.error = exc.failure
    except BuildError as exc:
        record.error = ToolFailure(kind="build", message=str(exc).splitlines()[0],
                                   remedy=exc.remedy, lines=exc.lines)
    except TimeoutError as exc:
        record.error = ToolFailure(kind="timeout", message=str(exc) or f"{name} timed out")
    except Exception as exc:
        from labwarden.lab.device import DeviceError

        if isinstance(exc, DeviceError):
            record.error = ToolFailure(kind="device", message=exc.problem, remedy=exc.remedy)
        else:
            raise
    finally:
        record.duration_s = round(time.monotonic() - t0, 4)
        record.progress = ctx.messages[mark:]
    return record
