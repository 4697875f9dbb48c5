"""`python -m pagesim trace info FILE`, `trace convert FILE --out FILE.jsonl` and `trace synth ...`."""

from __future__ import annotations

import argparse
from pathlib import Path

from pagesim.errors import UserError
from pagesim.options import name_text, non_negative_int, positive_float, positive_int
from pagesim.outputs import prepare_output_file
from pagesim.traces.load import FORMATS, TRACE_FILE_HELP, load_trace
from pagesim.traces.own_format import write_trace
from pagesim.traces.stats import trace_stats
from pagesim.traces.synth import DEFAULT_HASH_BLOCK_SIZE, PRESETS, synthesize


def register(subparsers: argparse._SubParsersAction) -> None:
    trace = subparsers.add_parser("trace", help="inspect, convert and synthesize request traces")
    sub = trace.add_subparsers(dest="trace_command", required=True, help="what to do with a trace")

    info = sub.add_parser("info", help="statistics and load summary of a trace file")
    info.add_argument("file", help=TRACE_FILE_HELP)
    info.add_argument("--format", default="auto", choices=FORMATS, help="trace format; auto detects it from the content")
    info.set_defaults(func=_info)

    convert = sub.add_parser("convert", help="rewrite a trace in pagesim's own format (JSON lines)")
    convert.add_argument("file", help=TRACE_FILE_HELP)
    convert.add_argument("--format", default="auto", choices=FORMATS, help="trace format; auto detects it from the content")
    convert.add_argument("--out", required=True, help="the pagesim-format file to write (FILE.jsonl)")
    convert.add_argument("--force", action="store_true", help="replace --out if it exists")
    convert.set_defaults(func=_convert)

    synth = sub.add_parser("synth", help="write a synthetic trace in pagesim's own format")
    synth.add_argument("--preset", required=True, choices=list(PRESETS), help="workload shape")
    synth.add_argument("--num-requests", type=positive_int, required=True, help="requests to generate")
    synth.add_argument("--rate", type=positive_float, required=True, help="mean arrival rate, requests per second")
    synth.add_argument("--arrival", default="poisson", choices=["poisson", "gamma"], help="inter-arrival distribution")
    synth.add_argument("--cv", type=positive_float, default=1.0, help="coefficient of variation of gamma inter-arrival gaps")
    synth.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    synth.add_argument("--hash-block-size", type=positive_int, default=DEFAULT_HASH_BLOCK_SIZE, help="tokens per prefix hash id (kshot, multiturn)")
    synth.add_argument("--priority-levels", type=non_negative_int, default=0,
                       help="add a priority column, uniform in 0..K-1 (for --policy priority); 0: none")
    synth.add_argument("--name", type=name_text, help="trace name recorded in the file (default: preset-N)")
    synth.add_argument("--out", required=True, help="the pagesim-format file to write (FILE.jsonl)")
    synth.add_argument("--force", action="store_true", help="replace --out if it exists")
    synth.set_defaults(func=_synth)


def _info(args: argparse.Namespace) -> int:
    trace = load_trace(args.file, args.format)
    print(f"trace {trace.name}")
    print(format_stats(trace_stats(trace), trace.hash_block_size))
    print(format_ideal_hit_rate(trace))
    print(trace.summary)
    return 0


def own_format_out(path: str, force: bool) -> Path:
    """--out of `trace convert` and `trace synth`, checked before any work (prepare_output_file) and refused when its
    name says another format (t.csv, t.json, t.parquet): the file is pagesim's own, JSON lines, whatever its name
    (.gz after .jsonl, or alone, compresses it)."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    if suffixes and suffixes[-1] != ".jsonl":
        raise UserError(f"--out {path}: expected a FILE.jsonl (or FILE.jsonl.gz) name: the trace is written in "
                        f"pagesim's own format, JSON lines, not {suffixes[-1]}")
    return prepare_output_file(path, force)


def _convert(args: argparse.Namespace) -> int:
    out = own_format_out(args.out, args.force)
    trace = load_trace(args.file, args.format)
    write_trace(trace, out)
    print(f"wrote {out}: {trace.summary}")
    return 0


def format_ideal_hit_rate(trace) -> str:
    """The prefix-cache hit rate the trace allows with unlimited memory, at the default block size."""
    from pagesim.block_hash import ideal_prefix_cache_hit_rate
    from pagesim.config import Config
    from pagesim.request import requests_from_trace

    block_size = Config().block_size
    rate = ideal_prefix_cache_hit_rate(requests_from_trace(trace), block_size)
    shown = "n/a" if rate is None else f"{rate:.1%}"
    return (f"ideal prefix_cache_hit_rate (unlimited memory, block_size {block_size}): {shown} "
            "of prompt tokens served from the cache at first admission")


def _synth(args: argparse.Namespace) -> int:
    out = own_format_out(args.out, args.force)
    trace = synthesize(
        args.preset, num_requests=args.num_requests, rate=args.rate, arrival=args.arrival, cv=args.cv,
        seed=args.seed, hash_block_size=args.hash_block_size, name=args.name,
        priority_levels=args.priority_levels,
    )
    write_trace(trace, out)
    print(f"wrote {out}: {trace.summary}")
    print(format_stats(trace_stats(trace), trace.hash_block_size))
    return 0


def format_stats(stats: dict, hash_block_size: int | None) -> str:
    # a huge rate (arrivals 1e-300 s apart) in digits would print some 300 of them
    rate = "n/a" if stats["rate"] is None else f"{stats['rate']:{'.3f' if stats['rate'] < 1e6 else '.3g'}} req/s"
    lines = [f"rows {stats['rows']}, span {stats['span_s']:.3f} s, rate {rate}"]
    for key in ("prompt_len", "output_len"):
        s = stats[key]
        lines.append(
            f"{key:<10}  mean {s['mean']:.1f}  p50 {s['p50']:g}  p90 {s['p90']:g}  p99 {s['p99']:g}  min {s['min']}  max {s['max']}"
        )
    ratio = stats["prefix_sharing_ratio"]
    lines.append(
        "prefix sharing: no hash ids" if ratio is None
        else f"prefix sharing: {ratio:.1%} of prompt blocks seen in an earlier request ({hash_block_size} tokens per block)"
    )
    return "\n".join(lines)
