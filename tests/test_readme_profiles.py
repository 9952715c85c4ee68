"""Every lab profile the README shows is a valid profile: each ```toml block that has a [lab]
table parses with LabProfile (unknown keys are refused, so no key shown can be made up)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from labwarden.lab.config import LabProfile

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
BLOCKS = [b for b in re.findall(r"```toml\n(.*?)```", README, re.S) if "[lab]" in b]


def test_the_readme_shows_both_own_device_profiles() -> None:
    assert len(BLOCKS) >= 2
    assert "## Your own device" in README


@pytest.mark.parametrize("block", BLOCKS, ids=[f"profile{i}" for i in range(len(BLOCKS))])
def test_readme_profile_is_valid(block: str) -> None:
    prof = LabProfile.from_dict(tomllib.loads(block), "README.md")
    assert prof.dut.env.get("PATH"), "a real DUT's profile names its PATH (no login shell runs)"
