"""The playbook file: TOML, validated strictly (unknown keys refused, errors name the step)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from labwarden.core.errors import LabError


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="name later steps refer to")
    tool: str
    args: dict[str, Any] = Field(default_factory=dict, description="may hold ${id.path} references")
    title: str | None = Field(None, description="what this step shows, for the progress display")
    expect: dict[str, Any] = Field(default_factory=dict, description="result path -> expected value")
    continue_on_error: bool = False


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    vars: dict[str, Any] = Field(default_factory=dict)
    steps: list[Step] = Field(alias="step", min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> Playbook:
        seen: set[str] = set()
        for s in self.steps:
            if s.id in seen or s.id in ("vars", "lab"):
                raise ValueError(f"step id {s.id!r} is used twice or is reserved (vars, lab)")
            seen.add(s.id)
        return self


class PlaybookError(LabError):
    """A playbook file that cannot be run; the problem names the step and key."""

    kind = "invalid_input"

    def __init__(self, problem: str,
                 remedy: str = "fix the named step or key (playbooks/vlab-hotspot.toml shows the format)"):
        super().__init__(problem, remedy)


def load(path: Path, overrides: dict[str, Any] | None = None) -> Playbook:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PlaybookError(f"{path}: {exc}") from None
    data.setdefault("vars", {}).update(overrides or {})
    try:
        return Playbook.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = list(err["loc"])
            if loc[:1] == ["step"] and len(loc) > 1 and isinstance(loc[1], int):
                steps = data.get("step", [])
                sid = steps[loc[1]].get("id", f"#{loc[1] + 1}") if loc[1] < len(steps) else loc[1]
                loc = [f"step {sid}", *loc[2:]]
            problems.append(f"{'.'.join(str(x) for x in loc)}: {err['msg']}")
        raise PlaybookError(f"{path}:\n  - " + "\n  - ".join(problems)) from None
