"""Command line: ``python -m xpops info``, ``bench`` and ``scale``."""

import argparse
import platform
import sys
from collections.abc import Sequence


def _version(module_name: str) -> str:
    try:
        module = __import__(module_name)
    except Exception as exc:
        return f"not available ({type(exc).__name__})"
    return str(getattr(module, "__version__", "unknown"))


def info() -> None:
    """Print versions, the default backend and the GPU, if any."""
    import xpops
    from xpops import _backend

    print(f"xpops {xpops.__version__}")
    print(f"python {platform.python_version()} ({sys.executable})")
    for name in ("numpy", "scipy", "array_api_compat", "array_api_strict", "torch", "jax"):
        print(f"{name} {_version(name)}")
    print(f"default backend: {_backend.default_backend()} (XPOPS_BACKEND)")
    reason = _backend.cupy_unavailable_reason()
    if reason is not None:
        print(f"cupy: {reason}")
        return
    import cupy

    print(f"cupy {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    for dev_id in range(cupy.cuda.runtime.getDeviceCount()):
        props = cupy.cuda.runtime.getDeviceProperties(dev_id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        mem = props["totalGlobalMem"] / 2**30
        cc = f"{props['major']}.{props['minor']}"
        print(f"gpu {dev_id}: {name}, {mem:.1f} GiB, compute capability {cc}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xpops", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print versions, the default backend and the GPU")
    bench = sub.add_parser("bench", help="benchmark xpops against its peers")
    from .bench import add_arguments

    add_arguments(bench)
    scale = sub.add_parser("scale", help="Dask throughput with 1 and more workers (needs dask)")
    from .bench import scaling

    scaling.add_arguments(scale)
    args = parser.parse_args(argv)
    if args.command == "info":
        info()
        return 0
    if args.command == "scale":
        return scaling.run(args)
    from .bench import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
