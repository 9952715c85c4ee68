"""A scripted planner: the overnight loop without a model (and without an API key).

`PatchPlanner` stands where the model stands in `Agent` (labwarden/agent/loop.py): each of its
"turns" answers with one tool call, worked out from the conversation so far -- so the same loop,
guard, transcript, records, morning summary, ledger and report apply, and a crashed run resumes
from its transcript like a model's. Its candidates are the patch files of a directory, in name
order: each is submitted (`patch_submit`, on the firmware's HEAD with no base patches) and, once
stored, judged (`experiment`); a patch refused at submission is not judged (the ledger lists it
as rejected). Then it answers `DONE:` with the tally. The loop's stops hold as for a model: the
deadline (--until), the lab profile's budgets (a refused call stops it), the turn cap.

Candidates that are config values are not here yet: a patch directory is the only source.
Nothing is priced: the planner makes no model calls (its session costs $0).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labwarden.agent.model import Model, ModelOptions, RetrySink, TextSink
from labwarden.core.errors import LabError
from labwarden.runtime.session import LabSession

PLANNER_MODEL = "planner:patches"
"""What the loop's config note records as its `model`."""
SUFFIXES = (".patch", ".diff")
NAME_MAX = 40


class PlannerError(LabError):
    kind = "invalid_input"


@dataclass
class Candidate:
    name: str
    """The patch name patch_submit gets (from the file name: lower case, [a-z0-9_-])."""
    path: Path
    diff: str
    summary: str | None


def _name(stem: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9_-]+", "-", stem.lower()).strip("-_")[:NAME_MAX] or "patch"
    name, n = base, 2
    while name in taken:
        tail = f"-{n}"
        name, n = base[:NAME_MAX - len(tail)] + tail, n + 1
    return name


def _summary(text: str) -> str | None:
    """A git format-patch's Subject (without its [PATCH ...] tag), else None."""
    m = re.search(r"^Subject:\s*(?:\[[^\]]*\]\s*)?(.+)$", text, re.M)
    return m.group(1).strip()[:300] if m else None


def candidates(directory: Path) -> list[Candidate]:
    """The patch files (*.patch, *.diff) of `directory`, in name order. Raises PlannerError when
    there is none (or the directory is missing)."""
    if not directory.is_dir():
        raise PlannerError(f"--patches: {directory} is not a directory",
                           "give a directory of unified diffs (*.patch or *.diff)")
    files = sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise PlannerError(f"--patches: no *.patch or *.diff file in {directory}",
                           "put one unified diff per file there (git format-patch writes them)")
    taken: set[str] = set()
    out = []
    for path in files:
        text = path.read_text(errors="replace")
        name = _name(path.stem, taken)
        taken.add(name)
        out.append(Candidate(name=name, path=path, diff=text, summary=_summary(text)))
    return out


@dataclass
class Block:
    """A content block shaped as the SDK's (what Agent reads of one)."""

    type: str
    text: str = ""
    id: str = ""
    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)


@dataclass
class Reply:
    """A turn's answer shaped as the SDK's Message (content and stop_reason)."""

    content: list[Block]
    stop_reason: str


@dataclass
class _Seen:
    uses: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, tuple[bool, Any]] = field(default_factory=dict)
    """tool_use id -> (ok, the result's JSON or the error's)."""


def _seen(messages: list[dict[str, Any]]) -> _Seen:
    seen = _Seen()
    for msg in messages:
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if msg.get("role") == "assistant" and block.get("type") == "tool_use":
                seen.uses.append(block)
            elif block.get("type") == "tool_result":
                texts = [c.get("text", "") for c in block.get("content") or [] if isinstance(c, dict)]
                try:
                    value = json.loads(texts[0]) if texts else None
                except ValueError:
                    value = texts[0]
                seen.results[str(block.get("tool_use_id"))] = (not block.get("is_error"), value)
    return seen


@dataclass
class PatchPlanner(Model):
    """The loop's planner over a directory of patches (see the module's docstring)."""

    candidates: list[Candidate] = field(default_factory=list)

    def __post_init__(self) -> None:
        """No client: nothing is reached, no key is needed."""

    @classmethod
    def of(cls, directory: Path) -> PatchPlanner:
        return cls(options=ModelOptions(model=PLANNER_MODEL), candidates=candidates(directory))

    async def close(self) -> None:
        return None

    def next_call(self, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
        """The next tool call (name, input) given the conversation, or None when every
        candidate has its answer."""
        seen = _seen(messages)
        for cand in self.candidates:
            submit = next((u for u in seen.uses if u.get("name") == "patch_submit"
                           and (u.get("input") or {}).get("name") == cand.name), None)
            if submit is None or str(submit.get("id")) not in seen.results:
                args: dict[str, Any] = {"name": cand.name, "diff": cand.diff}
                if cand.summary:
                    args["summary"] = cand.summary
                return "patch_submit", args
            ok, value = seen.results[str(submit.get("id"))]
            if not ok or not isinstance(value, dict) or "patch_id" not in value:
                continue  # rejected at submission: the ledger says why
            pid = value["patch_id"]
            judged = next((u for u in seen.uses if u.get("name") == "experiment"
                           and (u.get("input") or {}).get("patch") == pid
                           and str(u.get("id")) in seen.results), None)
            if judged is None:
                return "experiment", {"patch": pid}
        return None

    def tally(self, messages: list[dict[str, Any]]) -> str:
        seen = _seen(messages)
        decided: dict[str, int] = {}
        failed = 0
        for use in seen.uses:
            if use.get("name") != "experiment":
                continue
            ok, value = seen.results.get(str(use.get("id")), (False, None))
            if ok and isinstance(value, dict) and value.get("decision"):
                decided[str(value["decision"])] = decided.get(str(value["decision"]), 0) + 1
            else:
                failed += 1
        rejected = sum(1 for use in seen.uses if use.get("name") == "patch_submit"
                       and not seen.results.get(str(use.get("id")), (False, None))[0])
        parts = [f"{n} {d}" for d, n in sorted(decided.items())]
        if failed:
            parts.append(f"{failed} experiment call(s) refused or failed")
        if rejected:
            parts.append(f"{rejected} rejected at submission")
        return (f"DONE: {len(self.candidates)} patch(es) from the directory: "
                + (", ".join(parts) or "none judged") + ".")

    async def turn(self, ctx: LabSession, system: str, messages: list[dict[str, Any]],
                   on_text: TextSink | None = None, on_retry: RetrySink | None = None) -> Any:
        step = self.next_call(messages)
        if step is None:
            text = self.tally(messages)
            if on_text is not None:
                done = on_text(text)
                if done is not None:
                    await done
            return Reply([Block(type="text", text=text)], "end_turn")
        name, args = step
        n = sum(1 for m in messages if m.get("role") == "assistant") + 1
        return Reply([Block(type="tool_use", id=f"toolu_planner_{n:04d}", name=name, input=args)],
                     "tool_use")
