"""The command line: ``xpops`` and ``python -m xpops`` (info, bench, scale), in subprocesses."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import xpops
from xpops import __main__ as cli
from xpops.bench import _runner

ROOT = Path(__file__).resolve().parent.parent


def _run(*args, env=None, script=False, timeout=120):
    """Run the command line; ``script=True`` runs the installed ``xpops`` script."""
    environ = {k: v for k, v in os.environ.items() if k != "XPOPS_BACKEND"}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    environ.update(env or {})
    if script:
        exe = shutil.which("xpops")
        if exe is None:
            pytest.skip("the xpops script is not installed")
        command = [exe, *args]
    else:
        command = [sys.executable, "-m", "xpops", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=environ, timeout=timeout, check=False
    )


@pytest.mark.parametrize("script", [False, True])
def test_version(script):
    out = _run("--version", script=script)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"xpops {xpops.__version__}"


@pytest.mark.parametrize(("script", "prog"), [(False, "-m xpops"), (True, "xpops")])
def test_usage_names_the_program_as_called(script, prog):
    out = _run("--help", script=script)
    assert out.returncode == 0, out.stderr
    usage = out.stdout.splitlines()[0]
    assert usage.startswith("usage: ")
    if script:
        assert usage.startswith("usage: xpops [")
    else:
        assert f"{Path(sys.executable).name} -m xpops [" in usage
    sub = _run("bench", "--help", script=script)
    assert f"{prog} bench [" in sub.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [("/usr/bin/xpops", "xpops"), ("/x/xpops/__main__.py", "-m xpops"), ("xpops.exe", "xpops")],
)
def test_program_name(argv0, prog):
    assert cli.program_name(argv0).endswith(prog)


@pytest.mark.parametrize("command", [(), ("info",), ("bench",), ("scale",)])
def test_help_is_plain_text_and_every_option_shows_its_default(command):
    out = _run(*command, "--help")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for markup in ("``", ":func:", ":class:", ".. "):
        assert markup not in text
    options = [
        line for line in _option_entries(text) if not line.startswith(("-h, --help", "--version"))
    ]
    for entry in options:
        assert "(default: " in entry or "default: " in entry, entry


def _option_entries(text):
    """The options section of a help text, one entry (option and its help) a string."""
    lines = text.split("options:", 1)[1].splitlines()[1:] if "options:" in text else []
    entries: list[str] = []
    for line in lines:
        if not line.strip():
            break
        if line.startswith("  -"):
            entries.append(line.strip())
        elif entries:
            entries[-1] += " " + line.strip()
    return [" ".join(entry.split()) for entry in entries]


def test_bench_options_show_their_defaults():
    entries = " ".join(_option_entries(_run("bench", "--help").stdout))
    assert "--repeats N timed calls per case (default: 15)" in entries
    assert "--full" in entries
    assert "--json FILE write the results as JSON (default: none)" in entries


def test_info_reports_setting_versions_and_cpu():
    out = _run("info")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith(f"xpops {xpops.__version__}\n")
    assert "default backend: numpy (XPOPS_BACKEND is not set)" in text
    for name in ("numpy", "scipy", "dask", "distributed", "matplotlib"):
        assert any(line.startswith(f"{name} ") for line in text.splitlines()), name
    assert any(line.startswith("cpu ") and "logical CPUs" in line for line in text.splitlines())


def test_info_with_a_valid_setting():
    out = _run("info", env={"XPOPS_BACKEND": "numpy"})
    assert out.returncode == 0, out.stderr
    assert "default backend: numpy (XPOPS_BACKEND='numpy')" in out.stdout


@pytest.mark.parametrize("script", [False, True])
def test_info_reports_a_bad_backend_value(script):
    out = _run("info", env={"XPOPS_BACKEND": "torch"}, script=script)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert "default backend: none, XPOPS_BACKEND='torch' is not valid" in out.stdout
    assert "'numpy', 'cupy'" in out.stdout


@pytest.mark.parametrize("command", ["bench", "scale"])
def test_bad_backend_value_is_one_line(command):
    out = _run(command, env={"XPOPS_BACKEND": "torch"})
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"xpops {command}: XPOPS_BACKEND must be one of" in lines[0]
    assert "'torch'" in lines[0]


def test_import_still_raises_on_a_bad_backend_value():
    """Only the command line reports the value instead of raising."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    environ = {**os.environ, "XPOPS_BACKEND": "torch", "PYTHONPATH": path}
    out = subprocess.run(
        [sys.executable, "-c", "import xpops"],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )
    assert out.returncode == 1
    assert "ValueError: XPOPS_BACKEND must be one of" in out.stderr


def test_bench_on_cupy_without_cupy_is_one_line():
    pytest.importorskip("numpy")
    from xpops import _backend

    if _backend.cupy_unavailable_reason() is None:
        pytest.skip("CuPy and a GPU are available here")
    out = _run("bench", "--ops", "tril_indices", env={"XPOPS_BACKEND": "cupy"})
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("bench: XPOPS_BACKEND=cupy, but ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--repeats", "0"), "argument --repeats: must be a positive integer, got '0'"),
        (("--repeats", "-3"), "argument --repeats: must be a positive integer, got '-3'"),
        (("--repeats", "x"), "argument --repeats: must be a positive integer, got 'x'"),
        (("--ops", "nope"), "argument --ops: unknown ops ['nope']; known: ['tril_indices', "),
    ],
)
def test_bench_argument_errors(args, message):
    out = _run("bench", *args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert message in out.stderr
    assert out.stderr.splitlines()[0].startswith("usage: ")


def test_no_command_is_a_usage_error():
    out = _run()
    assert out.returncode == 2
    assert "the following arguments are required" in out.stderr


def test_bench_rows_stream_with_a_counter(tmp_path):
    """The header first, one row per case with its counter, no second table."""
    path = tmp_path / "bench.json"
    out = _run("bench", "--ops", "triu_indices", "--repeats", "1", "--json", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("xpops bench on ")
    assert lines[1].startswith("| # | op | case |")
    rows = [line for line in lines if line.startswith("| [")]
    total = len(rows)
    assert total >= 1
    for number, row in enumerate(rows, 1):
        assert row.startswith(f"| [{number}/{total}] | triu_indices |")
    assert sum(line.startswith("| # |") for line in lines) == 1  # the table is printed once
    assert lines[-1].startswith(f"{total} cases in ")
    result = json.loads(path.read_text())
    assert len(result["results"]) == total
    assert result["full"] is False
    assert all(r["memory_gb"] == {} for r in result["results"])  # no device memory on the CPU


def test_full_adds_cases(monkeypatch):
    """--full runs every default case and more. The big CPU cases are shrunk here: the test
    checks which cases are chosen, not their sizes."""
    import importlib

    small = {
        "sparse": {"CPU_CASES": [(300, 2_000, "float64")], "PYDATA_CASES": [((10, 10, 5), 50)]},
        "distributions": {
            "CPU_DENSITY_CASES": [(500, 3, "float64")],
            "CPU_CDF_CASES": [(2, 3, 1e-3)],
        },
    }
    for name in sorted(set(_runner._REGISTRY.values())):
        module = importlib.import_module(f"xpops.bench.{name}")
        for attr, value in small.get(name, {}).items():
            monkeypatch.setattr(module, attr, value)
        default = [(c.op, c.label) for c in module.cases("numpy")]
        full = [(c.op, c.label) for c in module.cases("numpy", full=True)]
        assert default, name
        if name == "latency":  # small calls only: --full adds none
            assert default == full
            continue
        assert set(default) < set(full), name
        assert len(full) == len(set(full)), name


def test_latency_cases_time_calls_back_to_back(monkeypatch):
    """The latency cases run (each and its peers), and `per_call` makes as many calls as fit
    in its batch, within its bounds, and reports ms per call."""
    from xpops.bench import _timing, latency

    cases = latency.cases("numpy")
    assert [c.op for c in cases] == ["latency"] * 5
    for case in cases:
        assert case.per_call
        case.run()
        for peer in case.peers.values():
            peer()
    calls = []
    clock = iter(range(10**6))
    # each reading of the clock advances it by 1 ms: the single call takes 1 ms, so a batch of
    # BATCH_MS = 20 ms holds 20 calls
    monkeypatch.setattr(_timing.time, "perf_counter", lambda: next(clock) * 1e-3)
    ms = _timing.per_call(lambda: calls.append(1), lambda: None, repeats=3)
    assert ms > 0
    assert len(calls) == _timing.WARMUP + 1 + 3 * 20
