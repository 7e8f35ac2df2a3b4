"""Packaging metadata: the licence file, what the sdist carries, and honest dependency floors."""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"

pytestmark = pytest.mark.skipif(
    not PYPROJECT.is_file(), reason="needs the source tree (pyproject.toml beside tests/)"
)


def _pyproject() -> dict:
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def _sdist_include() -> list[str]:
    return _pyproject()["tool"]["hatch"]["build"]["targets"]["sdist"]["include"]


def test_license_file_is_bsd3_and_matches_the_metadata():
    text = (ROOT / "LICENSE").read_text()
    assert _pyproject()["project"]["license"] == "BSD-3-Clause"
    assert text.startswith("BSD 3-Clause License")
    assert "Copyright (c) 2026, xpops developers" in text
    assert "Neither the name of the copyright holder" in text  # clause 3


@pytest.mark.parametrize(
    "path", ["conftest.py", "LICENSE", "README.md", "pyproject.toml", "xpops", "tests", "docs"]
)
def test_sdist_includes(path):
    """An unpacked sdist must run `pytest`: it needs the root conftest.py (which keeps doctest
    collection away from the CuPy modules) as well as the package and its tests."""
    include = _sdist_include()
    assert f"/{path}" in include or path in include, include
    assert (ROOT / path).exists()


def test_sdist_include_is_anchored():
    """Unanchored patterns ("xpops") also match folders of that name anywhere in the tree."""
    assert all(entry.startswith("/") for entry in _sdist_include())
