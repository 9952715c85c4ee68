"""The prompts and the remedies name only tools that exist.

Every backticked identifier in labwarden/prompts/*.md, and in the string literals of the modules
that write refusals and remedies (the guard, the knobs, the runner, the agent, the tools), must be
a registered tool or a field of some tool's input or output schema -- a prompt that tells a model
to call `source_grep` would only earn it `tool_unknown`. Docstrings are not messages and are
skipped. No fakes: the registry and the files as shipped.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from labwarden.prompts import all_prompts, prompt_dir
from labwarden.prompts import named as named_prompt
from labwarden.server.app import build_server
from labwarden.tools import registry

from . import labkinds

PACKAGE = Path(__file__).resolve().parent.parent / "labwarden"
MESSAGE_DIRS = ["guardrails", "lab/knobs", "runtime", "agent", "tools"]
"""Where refusals, remedies and the agent's own words are written."""
_TICKED = re.compile(r"`([^`\n]+)`")
_IDENT = re.compile(r"[a-z][a-z0-9_]*")
NOT_TOOLS = {"good", "unknown", "bad"}
"""Backticked words of the messages that are values, not names: the board's health states."""


def _fields(schema: dict[str, Any]) -> set[str]:
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, sub in node.get("properties", {}).items():
                names.add(key)
                walk(sub)
            for sub in node.values():
                if isinstance(sub, dict | list):
                    walk(sub)
        elif isinstance(node, list):
            for sub in node:
                walk(sub)

    walk(schema)
    return names


KNOWN_FIELDS = set().union(*(_fields(spec.input.model_json_schema())
                             | _fields(spec.output.model_json_schema())
                             for spec in registry.TOOLS.values()))


def unknown_tools(text: str) -> list[str]:
    """Backticked identifiers that are neither a tool nor a field of a tool's schema."""
    return [t for t in _TICKED.findall(text)
            if _IDENT.fullmatch(t) and t not in registry.TOOLS and t not in KNOWN_FIELDS
            and t not in NOT_TOOLS]


def _messages(path: Path) -> list[str]:
    """String literals of a module (f-strings' literal parts included), without the bare string
    statements -- docstrings of modules, classes, functions and attributes are not messages."""
    tree = ast.parse(path.read_text())
    docs = {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_check_catches_a_tool_that_does_not_exist() -> None:
    text = "Read with `source_read`, then `source_grep` it; answer `DONE:` with `window_s`."
    assert unknown_tools(text) == ["source_grep"]


@pytest.mark.parametrize("prompt", sorted(prompt_dir().glob("*.md")), ids=lambda p: p.name)
def test_prompts_name_only_registered_tools(prompt: Path) -> None:
    text = prompt.read_text()
    assert _TICKED.search(text), f"{prompt.name} names no tool at all"
    assert unknown_tools(text) == [], f"{prompt.name} names tools that do not exist"


def test_the_loop_prompt_names_the_tools_that_write_and_judge_patches() -> None:
    text = (prompt_dir() / "overnight-loop.md").read_text()
    named = set(_TICKED.findall(text))
    assert {"source_search", "source_read", "patch_submit", "experiment", "bisect"} <= named


def test_remedies_and_agent_messages_name_only_registered_tools() -> None:
    bad: dict[str, list[str]] = {}
    scanned = 0
    for d in MESSAGE_DIRS:
        for path in sorted((PACKAGE / d).glob("*.py")):
            for msg in _messages(path):
                scanned += "`" in msg
                if found := unknown_tools(msg):
                    bad.setdefault(str(path.relative_to(PACKAGE)), []).extend(found)
    assert scanned > 5, "no backticked message found: is the scan looking in the right place?"
    assert bad == {}, f"messages name tools that do not exist: {bad}"


def test_the_unsafe_path_remedy_points_at_patch_submit() -> None:
    """The issue's example: the guard's unsafe_path remedy names patch_submit, which exists now."""
    ticked = [m for m in _messages(PACKAGE / "guardrails" / "guard.py") if "`patch_submit`" in m]
    assert ticked and "patch_submit" in registry.TOOLS


# ---- per lab: the tools a lab lists, and the prompts it serves name only those -----------------

EXPECTED_UNLISTED = {
    "vlab": {"traffic_sweep", "saturate", "router_rules"},
    "qlab": {"traffic_sweep", "saturate", "router_rules"},
    "qlab-traffic": set(),
    "logfilt": {"associate", "traffic_sweep", "saturate", "router_rules"},
}
"""What each shipped lab kind lacks: logfilt holds no clients and has no traffic load."""


@pytest.mark.anyio
@pytest.mark.parametrize("kind", labkinds.KINDS)
async def test_each_lab_kinds_tool_list_and_prompts_agree(kind: str, tmp_path: Path) -> None:
    """The lab's own profile (written as its lab writes it) through the MCP server's own
    tools/list and prompts/get: the list is what the lab can run, and every tool a prompt names
    is on it."""
    profile = labkinds.profile(kind, tmp_path / kind)
    server = build_server(profile)
    listed = {t.name for t in await server.list_tools()}
    assert set(registry.TOOLS) - listed == EXPECTED_UNLISTED[kind]
    for pf in all_prompts():
        got = await server.get_prompt(pf.name, {})
        text = "\n".join(m.content.text for m in got.messages)  # type: ignore[union-attr]
        named = {t for t in _TICKED.findall(text) if t in registry.TOOLS}
        assert named <= listed, f"{kind}: {pf.name} names tools the lab does not list: {named - listed}"
        assert "{{" not in text and "{%" not in text, f"{kind}: {pf.name} left template syntax"


@pytest.mark.anyio
async def test_a_prompt_drops_what_its_lab_lacks(tmp_path: Path) -> None:
    """The check above could fail: over a repo of one commit logfilt lists no bisect, and its
    loop prompt then names none; a call to it is refused with the reason."""
    server = build_server(labkinds.logfilt_single(tmp_path / "one"))
    listed = {t.name for t in await server.list_tools()}
    assert "bisect" not in listed and "experiment" in listed
    loop = await server.get_prompt("overnight-loop", {})
    assert "`experiment`" in loop.messages[0].content.text  # type: ignore[union-attr]
    assert "`bisect`" not in loop.messages[0].content.text  # type: ignore[union-attr]
    assert "`bisect`" in named_prompt("overnight-loop").render(set(registry.TOOLS))
