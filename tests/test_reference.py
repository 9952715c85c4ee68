"""The documentation is generated where it can be and checked where it cannot: the reference pages
are what the code generates (sqlite-utils' `cog --check`), every lab.toml key the model accepts is
on its page, the site builds with no broken link or anchor, README stays a page, and no product
text names an internal study by its number."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from labwarden.lab.config import LabProfile

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABWARDEN_")}
    env["NO_MKDOCS_2_WARNING"] = "1"
    return env


def test_the_generated_reference_is_current() -> None:
    """scripts/gen-reference.py --check: README's tool list, the tools, lab.toml and CLI pages are
    what the code generates now (run the script without --check to rewrite them)."""
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-reference.py"), "--check"],
                         capture_output=True, text=True, cwd=ROOT, env=_clean_env(), timeout=120)
    assert res.returncode == 0, f"stale generated docs -- run scripts/gen-reference.py:\n{res.stderr}"


# ---- every lab.toml key the model accepts is on the reference page ------------------------------

def _schema_keys() -> set[tuple[str, str]]:
    """(table, key) for every key LabProfile accepts, read from its JSON schema (not from the
    generator's walk): a property whose value is a model is a table, anything else a key; a
    union of models ([load], [flash]) is one table holding every member's keys."""
    schema = LabProfile.model_json_schema()
    defs: dict[str, Any] = schema.get("$defs", {})

    def models(node: dict[str, Any]) -> list[dict[str, Any]]:
        if "$ref" in node:
            return [defs[node["$ref"].split("/")[-1]]]
        found = []
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(key, []):
                found += models(sub)
        return [m for m in found if "properties" in m]

    keys: set[tuple[str, str]] = set()

    def walk(model: dict[str, Any], table: str) -> None:
        for name, node in model["properties"].items():
            subs = models(node)
            if subs:
                for sub in subs:
                    walk(sub, f"{table}.{name}" if table else name)
            else:
                keys.add((table, name))

    walk(schema, "")
    return keys


def _page_keys() -> set[tuple[str, str]]:
    """(table, key) for every row of docs/reference/lab-toml.md's tables; a heading
    `## [load] kind = "none"` is table `load`, `## Top level` the table ""."""
    keys: set[tuple[str, str]] = set()
    table: str | None = None
    for line in (DOCS / "reference" / "lab-toml.md").read_text().splitlines():
        if line.startswith("## "):
            m = re.match(r"## \[([a-z_.]+)\]", line)
            table = m.group(1) if m else ("" if line == "## Top level" else None)
        elif table is not None and (m := re.match(r"\| `([a-z_0-9]+)` \|", line)):
            keys.add((table, m.group(1)))
    return keys


def test_every_lab_toml_key_is_on_the_reference_page() -> None:
    model, page = _schema_keys(), _page_keys()
    assert len(model) > 100, sorted(model)
    missing = sorted(f"[{t}] {k}" for t, k in model - page)
    made_up = sorted(f"[{t}] {k}" for t, k in page - model)
    assert not missing, f"keys the profile accepts that docs/reference/lab-toml.md lacks: {missing}"
    assert not made_up, f"keys on docs/reference/lab-toml.md the profile refuses: {made_up}"


def test_every_key_on_the_page_says_what_it_is() -> None:
    """Each row has a type, a default (or `required`), a description and the error a wrong
    value gives (the model's own message, as a profile with it would say)."""
    rows = [line for line in (DOCS / "reference" / "lab-toml.md").read_text().splitlines()
            if re.match(r"\| `[a-z_0-9]+` \|", line)]
    cells = [[c.strip() for c in r.replace("\\|", "/").split("|")] for r in rows]
    bare = [c[1] for c in cells if not all((c[2], c[3], c[5], c[6]))]
    assert not bare, f"rows without a type, default, description or error: {bare}"
    port = next(c for c in cells if c[1] == "`port`")
    assert "dut.ssh.port: Input should be a valid integer" in port[6], port


# ---- the site builds, and its link check can fail ----------------------------------------------

def _build(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, cwd=root,
                          env=_clean_env(), timeout=300)


def test_the_docs_build_with_no_broken_link(tmp_path: Path) -> None:
    """`mkdocs build --strict` (mkdocs.yml's validation: links and anchors), offline."""
    assert MKDOCS.exists(), "mkdocs is missing: `make setup` installs the dev extras"
    res = _build(ROOT, tmp_path / "site")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "reference" / "lab-toml" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The check above could fail: the same docs with one link to a missing page and one to a
    missing anchor do not build."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs" / "index.md").open("a") as f:
        f.write("\n[gone](how-to/no-such-page.md) and [no anchor](tutorial.md#no-such-anchor)\n")
    res = _build(tmp_path, tmp_path / "site")
    assert res.returncode != 0
    assert "no-such-page.md" in res.stderr and "no-such-anchor" in res.stderr, res.stderr


# ---- README is a page; product text names what a study is --------------------------------------

def test_readme_is_at_most_200_lines() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move the detail into docs/"


STUDY_NUMBER = re.compile(r"\bseeds? ?0\d\d\b|\bseed_?\d{3}\b", re.I)


def _product_text() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md")),
            *sorted((ROOT / "labwarden" / "prompts").glob("*.md")),
            *sorted((ROOT / "playbooks").glob("*.toml"))]


@pytest.mark.parametrize("path", _product_text(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_product_text_names_a_study_by_its_number(path: Path) -> None:
    """README, the docs (the generated CLI help and tool descriptions included), the prompts and
    the playbooks say what a study is ("the WiFi-daemon field study"), never its internal
    number."""
    found = STUDY_NUMBER.findall(path.read_text())
    assert not found, f"{path.relative_to(ROOT)} names {found}: say what the study is"


def test_the_study_check_catches_a_number() -> None:
    assert STUDY_NUMBER.findall("as in seed 000, and Seeds 001 and 002") == ["seed 000", "Seeds 001"]
