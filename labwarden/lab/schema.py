"""The JSON Schema of lab.toml, published from the profile's own model (LabProfile) so an editor
(taplo, VS Code's Even Better TOML) completes and checks every key while the profile is written.

`labwarden lab schema --out schema/lab.schema.json` writes it; the repository keeps that file
(tests/test_lab_check.py fails when it differs from what the model generates). An editor uses
it through taplo's `#:schema ./lab.schema.json` directive on a profile's first line, or a
`[[rule]]` with `schema.path` in .taplo.toml matching `lab.toml`.
"""

from __future__ import annotations

import json
from typing import Any

from labwarden.lab.config import LabProfile

SCHEMA_ID = "https://labwarden.invalid/schema/lab.schema.json"
REPO_PATH = "schema/lab.schema.json"
"""Where the repository keeps the published schema (relative to its root)."""


def profile_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a lab profile, as pydantic generates it from
    LabProfile -- without `source` (where a profile was read from: not a key of the file)."""
    schema = LabProfile.model_json_schema(mode="validation")
    schema["properties"].pop("source", None)
    _tagged_unions(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "labwarden lab profile (lab.toml)",
            "description": "One TOML file describing a lab: how to reach the DUT, how to build, "
            "flash and load it, what to measure, the gates and the policy. Unknown keys are "
            "refused. `labwarden lab check PROFILE` checks a profile and its DUT.",
            **{k: v for k, v in schema.items() if k not in ("title", "description")}}


def _tagged_unions(schema: dict[str, Any]) -> None:
    """A section that is a union on `kind` ([load], [flash]) names its kind, as the model reads
    it: pydantic's schema leaves a defaulted `kind` optional, so several variants would match a
    section. [flash] alone may leave it out (then it is sysupgrade) or say it the older way,
    `method = "..."`."""
    defs = schema["$defs"]
    for section in ("load", "flash"):
        union = schema["properties"][section]
        for kind, ref in union["discriminator"]["mapping"].items():
            variant = defs[ref.rsplit("/", 1)[-1]]
            if section == "load":
                variant["required"] = sorted({*variant.get("required", []), "kind"})
                continue
            variant["properties"]["method"] = {
                "const": kind, "deprecated": True,
                "description": "the older name of `kind` (read as kind when kind is not set)"}
            if kind != "sysupgrade":
                variant["anyOf"] = [{"required": ["kind"]}, {"required": ["method"]}]


def schema_text() -> str:
    """The schema as the repository keeps it: indented JSON, one trailing newline."""
    return json.dumps(profile_schema(), indent=2, ensure_ascii=False) + "\n"
