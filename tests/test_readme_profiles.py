"""Every lab profile the README and the docs show is a valid profile: each ```toml block that has
a [lab] table parses with LabProfile (unknown keys are refused, so no key shown can be made up)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from labwarden.lab.config import LabProfile

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [(p.relative_to(ROOT).as_posix(), b) for p in PAGES
          for b in re.findall(r"```toml\n(.*?)```", p.read_text(), re.S) if "[lab]" in b]


def test_the_docs_show_both_own_device_profiles() -> None:
    """The tutorial's daemon without clients and the how-to's WiFi router."""
    where = {page for page, _ in BLOCKS}
    assert {"docs/tutorial.md", "docs/how-to/wifi-router.md"} <= where, where


@pytest.mark.parametrize("page,block", BLOCKS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(BLOCKS)])
def test_docs_profile_is_valid(page: str, block: str) -> None:
    prof = LabProfile.from_dict(tomllib.loads(block), page)
    assert prof.dut.env.get("PATH"), "a real DUT's profile names its PATH (no login shell runs)"
