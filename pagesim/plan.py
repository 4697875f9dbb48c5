"""`python -m pagesim plan TRACE --slo ... --model M --gpu G [--max-gpus K] --out DIR`: SLO capacity planning.

The search space is every deployment of at most K GPUs (tensor-parallel degree tp in 1, 2, 4, 8, times replicas,
tp x replicas <= K; a tp whose weights leave no KV memory is skipped with its reason) crossed with the router
(for more than one replica) and the engine knobs of SEARCH (max_num_seqs, max_num_batched_tokens, block_size;
override with --grid NAME=V1,V2). Every candidate is simulated as one sweep task (pagesim.sweep, on Ray by
default), so an interrupted plan resumes.

The recommendation is the candidate that meets every SLO with the fewest GPUs, then the highest goodput. The
runner-up is the best candidate with fewer GPUs (most SLO attainment, then goodput) - it shows what one GPU
less costs - or, when none has fewer, the second-best candidate that meets the SLOs. DIR/plan.json holds
`recommendation`, `runner_up`, `candidates` (every candidate's configuration and metrics), `evaluated`,
`skipped` and `pareto` (per GPU count, the best goodput, and whether it meets the SLOs); DIR/pareto.csv the same
table.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from pagesim.errors import FlagError, OptionError, UserError, given_path
from pagesim.options import MAX_REPLICAS
from pagesim.outputs import json_text

TP_DEGREES = (1, 2, 4, 8)
MAX_GPUS = TP_DEGREES[-1] * MAX_REPLICAS  # the largest deployment plan proposes
SEARCH = {"max_num_seqs": [128, 256], "max_num_batched_tokens": [2048, 8192], "block_size": [16, 32]}
SHOWN = ("num_gpus", "tensor_parallel_size", "replicas", "router", "max_num_seqs", "max_num_batched_tokens",
         "block_size")


def skip_lines(refused: list[tuple[int, UserError]]) -> list[str]:
    """Each refused tp as `plan` prints it: "tensor_parallel_size=1: WHY"."""
    return [f"tensor_parallel_size={tp}: {exc}" for tp, exc in refused]


def deployments(base: dict, max_gpus: int, routers) -> tuple[list[dict], list[tuple[int, UserError]]]:
    """(tensor_parallel_size, replicas, router) choices within max_gpus, and each tp refused with its error: (tp, the
    UserError, in the CLI's words; `skip_lines` prints them)."""
    import argparse

    from pagesim.replay import config_from_args

    from pagesim.cost import make_cost_model

    out, refused = [], []
    for tp in TP_DEGREES:
        if tp > max_gpus:
            break
        try:  # the config and its cost model, as each candidate's run will make them (a profile times tp 1 only)
            config = config_from_args(argparse.Namespace(**{**base, "tensor_parallel_size": tp}))
            config.resolved_num_gpu_blocks
            make_cost_model(base.get("cost_model", "roofline"), config)
        except UserError as exc:
            refused.append((tp, exc))
            continue
        for replicas in range(1, min(max_gpus // tp, MAX_REPLICAS) + 1):  # more would be error rows (--replicas)
            for router in (routers if replicas > 1 else ["round-robin"]):
                out.append({"tensor_parallel_size": tp, "replicas": replicas, "router": router})
    return out, refused


class NoDeployment(UserError):
    """No deployment of at most `max_gpus` GPUs is left: every tensor-parallel degree was refused. `refused`: (tp, the
    UserError that refused it), so a front end can say it in its own words (the dashboard's Plan page)."""

    def __init__(self, message: str, max_gpus: int, refused: list[tuple[int, UserError]]):
        super().__init__(message)
        self.max_gpus, self.refused = max_gpus, refused


def option_error(exc: UserError) -> OptionError | None:
    """The OptionError behind a refused tp's error (config_from_args words it in flags: a FlagError), or None."""
    return exc if isinstance(exc, OptionError) else exc.option_error if isinstance(exc, FlagError) else None


def candidates(base: dict, max_gpus: int, search: dict, routers) -> tuple[list[dict], list[tuple[int, UserError]]]:
    import itertools

    deps, refused = deployments(base, max_gpus, routers)
    keys = list(search)
    knobs = [dict(zip(keys, v)) for v in itertools.product(*(search[k] for k in keys))]
    return [{**d, **k} for d in deps for k in knobs], refused


def rank(df: pd.DataFrame) -> pd.DataFrame:
    """ok rows, best first: meets the SLOs, fewest GPUs, highest goodput (then attainment, then the rows' order:
    run_plan gives them in the search's order)."""
    ok = df[df["status"] == "ok"].copy()
    ok["slo_met"] = ok["slo_met"].astype(bool)
    return ok.sort_values(["slo_met", "num_gpus", "goodput", "slo_attainment"],
                          ascending=[False, True, False, False], kind="stable")


def choose(df: pd.DataFrame) -> tuple[dict | None, dict | None]:
    ranked = rank(df)
    feasible = ranked[ranked["slo_met"]]
    if not len(feasible):
        return None, _best(ranked)
    rec = feasible.iloc[0]
    fewer = ranked[ranked["num_gpus"] < rec["num_gpus"]]
    runner = _best(fewer) if len(fewer) else (feasible.iloc[1].to_dict() if len(feasible) > 1 else None)
    return rec.to_dict(), runner


def _best(rows: pd.DataFrame) -> dict | None:
    """Closest to meeting the SLOs: most attainment, then goodput, then fewest GPUs."""
    if not len(rows):
        return None
    return rows.sort_values(["slo_attainment", "goodput", "num_gpus"], ascending=[False, False, True],
                            kind="stable").iloc[0].to_dict()


def pareto(df: pd.DataFrame) -> pd.DataFrame:
    """Per GPU count: the best goodput among candidates that meet the SLOs (or among all, flagged)."""
    rows = []
    for gpus, group in rank(df).groupby("num_gpus"):
        best = group.iloc[0]
        rows.append({"num_gpus": int(gpus), "goodput": best["goodput"], "slo_attainment": best["slo_attainment"],
                     "slo_met": bool(best["slo_met"]), "config_id": best["config_id"],
                     **{k: best[k] for k in SHOWN if k != "num_gpus"}})
    return pd.DataFrame(rows)


def describe(row: dict, slos) -> str:
    """Two lines: the candidate's deployment and knobs, then its figures ("n/a" for a figure a run could not give:
    goodput when every request was rejected, which leaves no makespan) and the SLOs it misses."""
    from pagesim.slo import missed

    from pagesim.sweep import shown

    parts = ", ".join(f"{k}={shown(row[k])}" for k in SHOWN
                      if k in row and not (k == "router" and row["replicas"] == 1))
    goodput, attainment = figure(row.get("goodput")), figure(row.get("slo_attainment"))
    figures = (f"goodput {'n/a' if goodput is None else f'{goodput:.3g} req/s'}, "
               f"SLO attainment {'n/a' if attainment is None else f'{attainment:.1%}'}")
    rejected, requests = figure(row.get("num_rejected")), figure(row.get("num_requests"))
    if rejected and requests:
        figures += f", {int(rejected):,} of {int(requests):,} requests rejected"
    miss = missed(row, slos)
    return f"{parts}\n    {figures}; " + ("meets every SLO" if not miss else "misses " + "; ".join(miss))


def figure(v) -> float | None:
    """A figure of a row, or None where it is missing (None, NaN: null in plan.json)."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def outcome(report: dict, slos) -> str:
    """What `plan` prints after the table: the recommendation and the runner-up, or the closest candidate."""
    rec, runner = report["recommendation"], report["runner_up"]
    if rec is None:
        head = f"no candidate meets {', '.join(map(str, slos))}"
        return head + (f"; closest:\n  {describe(runner, slos)}" if runner is not None else "; none ran to the end")
    text = "recommendation:\n  " + describe(rec, slos)
    if runner is not None:
        text += "\nrunner-up:\n  " + describe(runner, slos)
    return text


def pareto_table(report: dict) -> str:
    """The pareto rows as `plan` prints them; a missing figure is "n/a"."""
    front = pd.DataFrame(report["pareto"])
    for column in ("goodput", "slo_attainment"):
        if column in front:
            front[column] = pd.to_numeric(front[column], errors="coerce")
    return front.to_string(index=False, na_rep="n/a", float_format=lambda v: f"{v:.3g}")


def default_routers(base: dict, search: dict) -> list[str]:
    """The routers plan searches unless --grid router=... names them: every one, but prefix-aware only where the
    candidates cache prefixes (base's enable_prefix_caching, or a search over it); without a prefix cache it routes as
    least-outstanding-tokens, so its candidates were duplicates, each warning of a --router no one typed."""
    from pagesim.cluster import ROUTERS

    caching = search.get("enable_prefix_caching", [base.get("enable_prefix_caching", False)])
    return [r for r in ROUTERS if r != "prefix-aware" or any(caching)]


def plan_candidates(base: dict, slos, max_gpus: int, search: dict, routers=None) -> tuple[dict, list[dict], list[str]]:
    """The sweep's fixed options, the candidates and the skipped tp; a UserError when no deployment is left. `routers`:
    those given (--grid router=...), else default_routers."""
    routers = default_routers(base, search) if routers is None else routers
    base = {**base, "slo": [str(s) for s in slos], "replicas": 1, "router": "round-robin"}
    points, refused = candidates(base, max_gpus, search, routers)
    skipped = skip_lines(refused)
    if not points:
        raise NoDeployment(f"no deployment of {base['model']} on at most {max_gpus} {base['gpu']} GPUs: "
                           + "; ".join(skipped), max_gpus, refused)
    return base, points, skipped


def run_plan(trace, base: dict, slos, max_gpus: int, out, *, search: dict | None = None, routers=None,
             backend: str = "ray", address: str | None = None, num_cpus: int | None = None, progress: bool = True,
             on_row=None, notes: dict[str, str] | None = None) -> dict:
    """Evaluate every candidate (a resumable sweep in `out`), choose, write plan.json and pareto.csv; the report.
    notes: run_sweep's (sweep.check_points': the warning that refused candidates' error rows record)."""
    from pagesim.sweep import config_id, run_sweep, warning_lines

    search = dict(SEARCH if search is None else search)
    routers = default_routers(base, search) if routers is None else list(routers)
    base, points, skipped = plan_candidates(base, slos, max_gpus, search, routers)
    out = Path(out)
    df = run_sweep(trace, base, points, out, backend=backend, address=address, num_cpus=num_cpus,
                   progress=progress, on_row=on_row, notes=notes)
    if "num_gpus" not in df:
        raise UserError(f"every candidate failed; see {out / 'results.parquet'} (first error: {df['error'].iloc[0]})")
    # The rows come in the order their configurations finished (parallel workers, resumes); in the search's order,
    # candidates that tie (block 16 and 32 give the same figures when memory never binds) are broken the same way
    # whatever the workers: the first in the search wins.
    order = {config_id(point): i for i, point in enumerate(points)}
    df = df.iloc[df["config_id"].map(order).fillna(len(order)).argsort(kind="stable")].reset_index(drop=True)
    rec, runner = choose(df)
    front = pareto(df)
    front.to_csv(out / "pareto.csv", index=False)
    report = {
        "slos": [str(s) for s in slos], "trace": trace.name, "model": base["model"], "gpu": base["gpu"],
        "max_gpus": max_gpus, "search": search | {"router": routers},
        "recommendation": rec, "runner_up": runner, "evaluated": int(len(df)),
        "failed": int((df["status"] != "ok").sum()), "skipped": skipped, "warnings": warning_lines(df),
        "pareto": front.to_dict("records"), "candidates": df.to_dict("records"),
    }
    text = json_text(report)  # NaN and infinity as null
    (out / "plan.json").write_text(text)
    return json.loads(text)  # as plan.json holds it


def plan(args, parser) -> int:
    from pagesim.cluster import ROUTERS
    from pagesim.replay import trace_from_args
    from pagesim.run_warnings import emit
    from pagesim.slo import parse_slos
    from pagesim.sweep import NOT_SWEPT, backend_args, check_fixed_options, check_points, parse_grid, prepare_sweep_dir

    slos = parse_slos(args.slo)
    if not slos:
        raise UserError("plan needs at least one --slo, e.g. --slo ttft_p99=1 --slo tpot_p99=0.05")
    search = dict(SEARCH)
    routers = None  # default_routers, unless --grid router=... names them
    for text in args.grid:  # each --grid replaces one axis of the search
        name, _, values = text.partition("=")
        if name.strip().lstrip("-").replace("-", "_") == "router":
            routers = [v.strip() for v in values.split(",")]
            if not set(routers) <= set(ROUTERS) or not routers:
                raise UserError(f"--grid {text!r}: routers are {', '.join(ROUTERS)}")
            continue
        axis = parse_grid([text], parser)
        key = next(iter(axis[0]))
        if key in ("tensor_parallel_size", "max_gpus"):  # the deployments plan searches itself
            raise UserError(f"--grid {text!r}: plan searches the deployments itself (tensor_parallel_size in "
                            f"{', '.join(map(str, TP_DEGREES))} times replicas, within --max-gpus); drop this --grid")
        search[key] = [p[key] for p in axis]
    check_fixed_options(args, search, "plan")
    check_searched_options(args, parser, search)
    base = {k: v for k, v in vars(args).items() if k not in NOT_SWEPT}
    out = given_path(args.out, "--out")
    if (out / "plan.json").is_file() and not args.force:  # a finished plan: its resume would rewrite plan.json
        raise UserError(f"--out {args.out}: holds a finished plan (plan.json); pass --force to plan again into it, "
                        "or choose another --out")
    # its errors, and every candidate's config checks (check_points), before --out is touched and the trace read
    fixed, points, _ = plan_candidates(base, slos, args.max_gpus, search, routers)
    notes, refused = check_points(fixed, points, "plan", keys=search)
    prepare_sweep_dir(args.out, args.force)
    if refused:
        print(f"warning {refused}", file=sys.stderr)
    trace = trace_from_args(args)
    print(trace.summary.report())
    emit(trace.summary.warnings, [])  # the load's (stderr); each row records its configuration's own
    report = run_plan(trace, base, slos, args.max_gpus, out, search=search, routers=routers, notes=notes,
                      **backend_args(args))
    for line in report["warnings"]:
        if line != refused:  # printed before the candidates ran
            print(f"warning {line}", file=sys.stderr)
    print(f"plan: {report['evaluated']} candidates on at most {args.max_gpus} GPUs"
          + "".join(f"\n  skipped {s}" for s in report["skipped"]))
    print(pareto_table(report))
    print(outcome(report, slos))
    print(f"wrote {out / 'plan.json'}, {out / 'pareto.csv'}, {out / 'results.parquet'}")
    return 0


def check_searched_options(args, parser, search: dict) -> None:
    """Before any work: an option typed on the command line that plan searches itself (the deployment's tensor
    parallelism, each axis of the search) would be replaced by the search without a word: refused, saying how to fix
    an axis instead (--grid NAME=V)."""
    from pagesim.sweep import check_one_kv_size, typed_options

    typed = typed_options(args, parser, ["tensor_parallel_size",
                                         *(k for k in search if set(search[k]) != {getattr(args, k, None)})])
    if "tensor_parallel_size" in typed:
        raise UserError(f"{typed['tensor_parallel_size']}: plan searches the deployments itself (tensor_parallel_size "
                        f"in {', '.join(map(str, TP_DEGREES))} times replicas, within --max-gpus); drop it")
    for key, flag in typed.items():
        values = ", ".join(str(v) for v in search[key])
        raise UserError(f"{flag}: plan searches {key} over {values} itself, which would replace it; to fix it, "
                        f"pass --grid {key}={getattr(args, key)} instead")
    check_one_kv_size(args, parser, search)


def register(sub) -> None:
    from pagesim.options import bounded_int
    from pagesim.replay import add_run_options
    from pagesim.sweep import add_backend_options

    p = sub.add_parser("plan", help="find the deployment that meets latency SLOs with the fewest GPUs")
    add_run_options(p)
    p.add_argument("--slo", action="append", default=[], metavar="METRIC_PCT=SECONDS",
                   help="latency SLO to meet, e.g. ttft_p99=1 (repeatable; at least one)")
    p.add_argument("--max-gpus", type=bounded_int(MAX_GPUS, f"tensor parallelism of up to {TP_DEGREES[-1]} GPUs "
                                                  f"times at most {MAX_REPLICAS:,} replicas"),
                   default=8, help=f"largest deployment to consider (GPUs; at most {MAX_GPUS:,})")
    p.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                   help=f"replace one axis of the search (default: {SEARCH}, every router; prefix-aware with prefix caching)")
    add_backend_options(p)
    p.set_defaults(func=lambda args: plan(args, p))
