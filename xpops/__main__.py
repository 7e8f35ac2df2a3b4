"""Command line: ``xpops info``, ``xpops bench`` and ``xpops scale`` (also ``python -m xpops``)."""

import argparse
import importlib.metadata
import os
import platform
import sys
from collections.abc import Sequence

import xpops

from . import _backend

DESCRIPTION = """\
xpops: small, fast, exact array operations for NumPy, CuPy and any array-API namespace.

commands:
  info    versions, the default backend, the CPU and the GPU, if any
  bench   time every op against its peers on the default backend
  scale   Dask throughput with 1 and more workers (needs dask and distributed)

XPOPS_BACKEND (numpy, the default, or cupy) picks the backend that bench times."""

# distribution name -> what `info` calls it
_PACKAGES = (
    "numpy",
    "scipy",
    "array-api-compat",
    "array-api-strict",
    "dask",
    "distributed",
    "matplotlib",
    "torch",
    "jax",
)


def program_name(argv0: str | None = None) -> str:
    """The program as it was called: ``xpops`` for the script, ``python -m xpops`` otherwise
    (with the interpreter's name as typed)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    name = os.path.basename(argv0)
    if name in ("__main__.py", "-m", "-c", ""):
        interpreter = os.path.basename(sys.orig_argv[0]) if sys.orig_argv else "python"
        return f"{interpreter or 'python'} -m xpops"
    return name.removesuffix(".exe").removesuffix("-script.py")


def backend_error() -> str | None:
    """The message of a bad ``XPOPS_BACKEND`` value, or None when it is valid or unset.

    ``import xpops`` raises on a bad value; the command line imports xpops with the default
    backend instead (see ``xpops/__init__.py``) and reports it here.
    """
    try:
        _backend._read_backend()
    except ValueError as exc:
        return str(exc)
    return None


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu() -> str:
    """The CPU's model name and how many logical CPUs this process may use."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {usable} logical CPUs usable (of {os.cpu_count()})"


def info() -> int:
    """Print versions, the backend setting, the CPU and the GPU, if any."""
    print(f"xpops {xpops.__version__}")
    print(f"python {platform.python_version()} ({sys.executable})")
    print(f"platform {platform.platform()}")
    print(f"cpu {_cpu()}")
    for name in _PACKAGES:
        print(f"{name} {_version(name)}")
    raw = os.environ.get("XPOPS_BACKEND")
    error = backend_error()
    if raw is None:
        print("default backend: numpy (XPOPS_BACKEND is not set)")
    elif error is not None:
        print(f"default backend: none, XPOPS_BACKEND={raw!r} is not valid ({error})")
    else:
        print(f"default backend: {_backend.default_backend()} (XPOPS_BACKEND={raw!r})")
    reason = _backend.cupy_unavailable_reason()
    if reason is not None:
        print(f"cupy: {reason}")
        return 0
    import cupy

    print(f"cupy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    for dev_id in range(cupy.cuda.runtime.getDeviceCount()):
        props = cupy.cuda.runtime.getDeviceProperties(dev_id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        mem = props["totalGlobalMem"] / 2**30
        cc = f"{props['major']}.{props['minor']}"
        print(f"gpu {dev_id}: {name}, {mem:.1f} GiB, compute capability {cc}")
    return 0


def show_defaults(parser: argparse.ArgumentParser) -> None:
    """Append ``(default: ...)`` to the help of every option of `parser` that does not say it."""
    for action in parser._actions:
        if not action.option_strings or action.default == argparse.SUPPRESS:
            continue
        text = action.help or ""
        if "default" in text:
            continue
        if action.default is None or action.default is False:
            shown = "off" if action.default is False else "none"
        else:
            shown = "%(default)s"
        action.help = f"{text} (default: {shown})".strip()


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    from .bench import add_arguments, scaling

    prog = program_name() if prog is None else prog
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION, formatter_class=formatter)
    parser.add_argument(
        "--version", action="version", version=f"xpops {xpops.__version__}", help="print it"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{info,bench,scale}")
    sub.add_parser(
        "info",
        help="print versions, the backend setting, the CPU and the GPU",
        description="Print the versions of xpops and its dependencies, the XPOPS_BACKEND "
        "setting (a bad value is reported, not raised), the CPU and the CUDA devices.",
    )
    bench = sub.add_parser(
        "bench",
        help="time every op against its peers",
        description="Time every op on the default backend (XPOPS_BACKEND) against each "
        "installed peer. One row per case as it finishes; the big cases run with --full.",
    )
    add_arguments(bench)
    scale = sub.add_parser(
        "scale",
        help="Dask throughput with 1 and more workers (needs dask)",
        description="Dask throughput of the ops on a LocalCluster (or LocalCUDACluster with "
        "--gpu) with 1 and more workers, against the in-memory call.",
    )
    scaling.add_arguments(scale)
    for p in (bench, scale):
        show_defaults(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "info":
        return info()
    error = backend_error()
    if error is not None:
        print(f"{parser.prog} {args.command}: {error}", file=sys.stderr)
        return 2
    if args.command == "scale":
        from .bench import scaling

        return scaling.run(args)
    from .bench import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
