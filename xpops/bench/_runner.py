"""The runner: parse arguments, measure bandwidth, time every case and its peers, report."""

import argparse
import contextlib
import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import _backend
from ._case import Case
from ._timing import REPEATS, make_timer

# op name -> module (under xpops.bench) whose `cases(backend)` lists its cases
_REGISTRY = {
    "tril_indices": "indexing",
    "triu_indices": "indexing",
    "logcumsumexp": "cumulative",
    "cholesky_solve": "linalg",
    "sparse.divide": "sparse",
    "MultivariateNormal.log_prob": "distributions",
    "MultivariateNormal.sample": "distributions",
    "MultivariateNormal.cdf": "distributions",
    "logcumsumexp backward": "gradients",
    "cholesky_solve backward": "gradients",
    "sparse.divide backward": "gradients",
    "MultivariateNormal.log_prob backward": "gradients",
    "latency": "latency",
}


def _op_list(text: str) -> list[str]:
    ops = _split(text)
    unknown = [op for op in ops if op not in _REGISTRY]
    if unknown:
        msg = f"unknown ops {unknown}; known: {list(_REGISTRY)}"
        raise argparse.ArgumentTypeError(msg)
    return ops


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"must be a positive integer, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ops",
        type=_op_list,
        default=list(_REGISTRY),
        metavar="OPS",
        help="comma-separated ops to run (default: all): " + ", ".join(_REGISTRY),
    )
    parser.add_argument(
        "--peers",
        default="",
        help="comma-separated peers to time (default: every installed "
        "one of torch, jax, cupy, cupyx, cupyx-trsm, numpy, scipy, 'scipy x+y', ...); "
        "'none' for none",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also run the big cases (minutes on a CPU; default: off, the default run takes "
        "about a minute on two cores)",
    )
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    parser.add_argument("--plot", metavar="FILE", help="draw the speed-ups (needs matplotlib)")
    parser.add_argument(
        "--repeats",
        type=_positive_int,
        default=REPEATS,
        metavar="N",
        help="timed calls per case (default: %(default)s)",
    )


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _collect(ops: list[str], backend: str, full: bool) -> list[Case]:
    import importlib

    modules: list[str] = []
    for op in ops:
        if _REGISTRY[op] not in modules:
            modules.append(_REGISTRY[op])
    cases: list[Case] = []
    for module_name in modules:
        module = importlib.import_module(f"xpops.bench.{module_name}")
        cases.extend(c for c in module.cases(backend, full=full) if c.op in ops)
    return cases


def _safe_time(timer: Any, fn: Callable[[], Any], repeats: int, per_call: bool) -> float | str:
    try:
        return timer.per_call(fn, repeats) if per_call else timer.time(fn, repeats)
    except Exception as exc:  # a peer that cannot do the case is reported, not fatal
        return f"{type(exc).__name__}"
    finally:
        gc.collect()
        # a peer's failure is its row's to report: a device left unusable fails the next case
        with contextlib.suppress(Exception):
            timer.release()


def run(args: argparse.Namespace) -> int:
    """Print the header, then one row per case as it finishes; 2 when the backend is unusable."""
    backend = _backend.default_backend()
    if backend == "cupy":
        reason = _backend.cupy_unavailable_reason()
        if reason is not None:
            reason = " ".join(reason.split())  # one line
            print(f"bench: XPOPS_BACKEND=cupy, but {reason}", file=sys.stderr)
            return 2
    peers_wanted = None if not args.peers else set(_split(args.peers)) - {"none"}
    start = time.perf_counter()
    timer = make_timer(backend)
    bandwidth = timer.bandwidth()
    device = timer.device_name()
    cases = _collect(args.ops, backend, args.full)
    print(_header(device, backend, bandwidth, args), flush=True)

    records = []
    for number, case in enumerate(cases, 1):
        case_start = time.perf_counter()
        timer.release()
        memory = timer.memory()
        ms = (
            timer.per_call(case.run, args.repeats)
            if case.per_call
            else timer.time(case.run, args.repeats)
        )
        gbps = case.nbytes / ms / 1e6
        peers = {
            name: _safe_time(timer, fn, args.repeats, case.per_call)
            for name, fn in case.peers.items()
            if peers_wanted is None or name in peers_wanted
        }
        record = {
            "op": case.op,
            "case": case.label,
            "xpops_ms": ms,
            "gb_per_s": gbps,
            "bandwidth_kind": case.bandwidth,
            "bandwidth_fraction": gbps / bandwidth[case.bandwidth],
            "peers_ms": peers,
            "wall_s": time.perf_counter() - case_start,
            "memory_gb": memory,
        }
        records.append(record)
        print(_row(record, f"[{number}/{len(cases)}]"), flush=True)

    total = time.perf_counter() - start
    rest = "" if args.full else "; the big cases run with --full"
    print(f"\n{len(cases)} cases in {total:.0f} s{rest}")
    if args.json:
        with open(args.json, "w") as f:
            payload = {"device": device, "backend": backend, "bandwidth_gb_per_s": bandwidth}
            json.dump({**payload, "full": args.full, "results": records}, f, indent=1)
    if args.plot:
        _plot(records, device, args.plot)
    return 0


def _peer_text(record: dict[str, Any]) -> str:
    parts = []
    for name, t in record["peers_ms"].items():
        if isinstance(t, str):
            parts.append(f"{name} fails ({t})")
        else:
            parts.append(f"{name} {t:.3f} ms ({t / record['xpops_ms']:.2f}x)")
    return "; ".join(parts)


def _row(r: dict[str, Any], counter: str) -> str:
    return (
        f"| {counter} | {r['op']} | {r['case']} | {r['xpops_ms']:.3f} | {r['gb_per_s']:.0f} | "
        f"{100 * r['bandwidth_fraction']:.0f}% of {r['bandwidth_kind']} | {_peer_text(r)} | "
        f"{r['wall_s']:.1f} |"
    )


def _header(device: str, backend: str, bw: dict[str, float], args: argparse.Namespace) -> str:
    rates = f"copy {bw['copy']:.0f} GB/s, fill {bw['fill']:.0f} GB/s"
    what = "all cases" if args.full else "default cases"
    return "\n".join(
        [
            f"xpops bench on {device} ({backend}); {rates}; {what}, {args.repeats} repeats",
            "| # | op | case | xpops ms | GB/s | % of bandwidth | peers: ms (peer / xpops) "
            "| wall s |",
            "|---|---|---|---|---|---|---|---|",
        ]
    )


def _plot(records: list[dict[str, Any]], device: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, speedups, names = [], [], []
    for r in records:
        for name, t in r["peers_ms"].items():
            if not isinstance(t, str):
                labels.append(f"{r['op']} {r['case']} vs {name}")
                speedups.append(t / r["xpops_ms"])
                names.append(name)
    fig, ax = plt.subplots(figsize=(9, 0.3 * len(labels) + 1.5))
    ax.barh(range(len(labels)), speedups, color="tab:blue")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("peer time / xpops time (> 1: xpops faster)")
    ax.set_title(f"xpops speed-up on {device}")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
