"""`python -m pagesim parity TRACE [replay options] --out DIR`: pagesim against vLLM v1, step by step.

Writes DIR/parity.json (n_steps_compared, n_steps_differing, first_difference
with both sides, the config) and DIR/steps.csv (one row per step, both sides),
and exits 1 when any step differs.
"""

from __future__ import annotations

import argparse
import json

from pagesim.errors import UserError
from pagesim.outputs import json_text

DIFF_EXIT = 1


def register(sub) -> None:
    from pagesim.options import positive_float
    from pagesim.replay import add_run_options

    p = sub.add_parser("parity", help="replay a trace through pagesim's and vLLM v1's schedulers, compare every step")
    add_run_options(p)
    p.add_argument("--step-s", type=positive_float, default=0.02,
                   help="a request arrives at step floor(arrival_time / STEP_S) on both sides (default 0.02)")
    p.set_defaults(func=parity)


def _oracle_available() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise UserError(
            f"vLLM is not importable ({exc}); install the oracle with "
            "`python3 -m pip install --no-deps -r requirements-vllm.txt`"
        ) from None


def parity(args) -> int:
    import pandas as pd

    from pagesim.outputs import prepare_output_dir
    from pagesim.parity.compare import check_parity_config, release_steps, run_parity
    from pagesim.replay import config_from_args, trace_from_args
    from pagesim.request import requests_from_trace
    from pagesim.run_warnings import REJECTED_SHARE, config_warnings, emit

    if args.baseline:
        raise UserError("--baseline does not apply to parity (vLLM has no contiguous baseline)")
    if args.cost_model != "roofline":
        raise UserError("--cost-model does not apply to parity (it compares the schedules step by step, not their times)")
    config = config_from_args(args)
    check_parity_config(config)  # before the trace is read (run_parity checks it too, for callers of the API)
    _oracle_available()
    out = prepare_output_dir(args.out, args.force)  # before any work
    trace = trace_from_args(args)
    print(trace.summary)
    warnings: list[str] = []
    emit([w.split("; requests.parquet")[0] for w in config_warnings(config, trace, typed=getattr(args, "typed", None))], warnings)  # replay's, but
    # parity writes no requests.parquet
    steps = release_steps(requests_from_trace(trace), args.step_s)
    result = run_parity(config, lambda: requests_from_trace(trace), steps)
    rejected = sum(len(r["pagesim"]["rejected"]) for r in result.rows)
    if rejected > REJECTED_SHARE * len(trace.df):  # the steps compared are those of the requests left
        emit([f"parity: {rejected:,} of {len(trace.df):,} requests ({rejected / len(trace.df):.1%}) were rejected on "
              "arrival, so their steps compare nothing; usually --max-model-len or --num-gpu-blocks too small"], warnings)
    summary = {**result.summary(), "trace": trace.name, "step_s": args.step_s, "warnings": warnings}
    (out / "parity.json").write_text(json_text(summary))
    table = pd.DataFrame(
        [{"step": r["step"], "differs": r["differs"],
          **{f"pagesim_{k}": json.dumps(v) for k, v in r["pagesim"].items()},
          **{f"vllm_{k}": json.dumps(v) for k, v in r["vllm"].items()}} for r in result.rows]
    )
    table.to_csv(out / "steps.csv", index=False)
    print(f"{trace.name}: {result.n_steps_differing} of {result.n_steps_compared} steps differ "
          f"({result.num_preemptions} preemptions, prefix hit rate "
          f"{f'{result.prefix_hit_rate:.1%}' if config.enable_prefix_caching else 'n/a: prefix caching off'})")
    if result.first_difference:
        fd = result.first_difference
        print(f"first difference at step {fd['step']} in {', '.join(fd['fields'])}:")
        for f in fd["fields"]:
            print(f"  {f}: pagesim {_short(fd['pagesim'][f])}  vllm {_short(fd['vllm'][f])}")
    if result.stuck:
        print(f"stopped: {result.stuck}")
    print(f"wrote {out}/parity.json, steps.csv")
    return DIFF_EXIT if result.n_steps_differing or result.stuck else 0


def _short(v, n: int = 200) -> str:
    s = json.dumps(v)
    return s if len(s) <= n else s[: n - 3] + "..."
