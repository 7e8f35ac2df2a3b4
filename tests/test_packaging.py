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


def _floors(requirements: list[str]) -> dict[str, str]:
    floors = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9.]+)", requirement)
        assert match is not None, f"{requirement!r}: CI pins `name>=floor`, write it so"
        floors[match[1].lower()] = match[2]
    return floors


def test_floors_are_written_as_ge_and_honest():
    """CI's second virtualenv pins every floor of the dependencies and the test extra and runs
    the tests there. The runtime floors: SciPy 1.13 is the first built for NumPy 2, Dask
    before 2024.12 fails the MVN tests. The test extra names no higher floor of a runtime
    dependency, so that the pinned run tests the floors users may install."""
    project = _pyproject()["project"]
    runtime = _floors(project["dependencies"])
    test = _floors(project["optional-dependencies"]["test"])
    dask = _floors(project["optional-dependencies"]["dask"])
    assert runtime == {"numpy": "2.0", "scipy": "1.13", "array-api-compat": "1.11"}
    assert dask == {"dask": "2024.12", "distributed": "2024.12"}
    assert "array-api-extra" not in test  # nothing imports it
    for name, floor in test.items():
        if name in runtime or name in dask:
            assert floor == (runtime.get(name) or dask[name]), name


@pytest.mark.parametrize("extra", ["test", "dask"])
def test_no_unused_dependencies(extra):
    """Every runtime dependency is imported by xpops; every test dependency by the tests."""
    project = _pyproject()["project"]
    modules = {"array-api-compat": "array_api_compat", "array-api-strict": "array_api_strict"}
    sources = {
        "runtime": "\n".join(p.read_text() for p in (ROOT / "xpops").rglob("*.py")),
        "tests": "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py")),
    }
    for name in _floors(project["dependencies"]):
        module = modules.get(name, name)
        assert re.search(rf"^\s*(import|from) {module}\b", sources["runtime"], re.M), name
    for name in _floors(project["optional-dependencies"][extra]):
        if name in ("pytest", "scipy"):
            continue
        module = modules.get(name, name)
        pattern = rf"(^\s*(import|from) {module}\b|importorskip\(\"{module}\"\))"
        text = sources["tests"] + sources["runtime"]
        assert re.search(pattern, text, re.M), name


def test_ci_runs_the_tests_at_the_minimum_versions():
    text = (ROOT / ".ci" / "run").read_text()
    assert "minimum versions" in text
    assert 'pip install -c "$minimum/constraints.txt" -e ".[test]"' in text
