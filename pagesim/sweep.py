"""`python -m pagesim sweep TRACE --grid NAME=V1,V2 ... --out DIR`: one trace over the cross product of grids.

Every replay option can be swept (`--grid block_size=8,16,32 --grid router=round-robin,prefix-aware`), under its
option name with dashes or underscores, plus two conveniences: `layout` (paged, or a contiguous baseline's reserve
policy max|pow2|oracle) and `kv_cache_gib` (KV memory in GiB: num_gpu_blocks = GiB / bytes per block, so block sizes
compare at equal memory). Trace options (--limit, --rate, ...) are not sweepable: the trace is loaded once.

Each configuration is one task: on Ray (`--backend ray`, the default; a local instance unless `--address`), with
the trace put in the object store once, or in local processes (`--backend local`). Rows stream to
DIR/results.parquet (rewritten atomically as they come, at most every FLUSH_S seconds): the configuration's columns,
`config_id`, `status` (ok|error), `error`, then the summary figures (nested ones flattened: ttft_s.p99 ->
ttft_s_p99). A configuration that raises becomes an error row. Re-running the same command resumes: configurations
whose `config_id` is already in results.parquet are skipped. DIR/sweep.json records the trace and fixed options, and
a resume with different ones is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

import pandas as pd

from pagesim.config import MAX_SIMULATED_BLOCKS, SIMULATED_BLOCKS_LIMIT, host_blocks
from pagesim.errors import OptionError, UserError, given_path
from pagesim.specs import GIB

FLUSH_S = 2.0
LAYOUTS = ("paged", "max", "pow2", "oracle")
EXTRA_PARAMETERS = ("layout", "kv_cache_gib")
TRACE_OPTIONS = ("trace", "format", "limit", "start_s", "end_s", "time_scale", "rate")
BACKENDS = ("ray", "local")
BACKEND_OPTIONS = ("backend", "address", "num_cpus")  # where the configurations run (add_backend_options): not swept
NOT_SWEPT = TRACE_OPTIONS + ("out", "force", "baseline", "slo", "func", "argv", "command", "command_parser", "grid",
                             *BACKEND_OPTIONS)
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


# ---- the grid ---------------------------------------------------------------------------------
def sweepable(parser: argparse.ArgumentParser) -> list[str]:
    """The names `--grid` takes for the command of `parser` (sweep's, plan's): its options but the fixed ones
    (NOT_SWEPT), then EXTRA_PARAMETERS."""
    return sorted(a.dest for a in parser._actions if a.dest not in NOT_SWEPT and a.dest != "help") + list(EXTRA_PARAMETERS)


def parse_grid(texts: list[str], parser: argparse.ArgumentParser) -> list[dict]:
    """--grid NAME=V1,V2 flags -> the cross product, one dict of typed values per configuration (grid order)."""
    actions = {a.dest: a for a in parser._actions}
    options = sweepable(parser)
    axes: dict[str, list] = {}
    for text in texts:
        name, sep, values = text.partition("=")
        key = name.strip().lstrip("-").replace("-", "_")
        if not sep or not values.strip():
            raise UserError(f"--grid {text!r}: expected NAME=V1,V2,... e.g. --grid block_size=8,16,32")
        if key not in options:
            raise UserError(f"--grid {text!r}: cannot sweep {name!r}; sweepable: {', '.join(options)}")
        if key in axes:
            raise UserError(f"--grid {name} given twice")
        axes[key] = list(dict.fromkeys(_convert(key, v.strip(), actions.get(key), text) for v in values.split(",")))
    keys = list(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def _convert(key: str, value: str, action, text: str):
    def bad(expected: str):
        return UserError(f"--grid {text!r}: {value!r} is not {expected} for {key}")

    if key == "layout":
        if value not in LAYOUTS:
            raise bad(f"one of {', '.join(LAYOUTS)}")
        return value
    if key == "kv_cache_gib":
        from pagesim.options import positive_float

        try:
            return positive_float(value)
        except argparse.ArgumentTypeError:
            raise bad("a positive number of GiB") from None
    if action.choices is not None and action.type is None and not isinstance(action.default, bool):
        if value not in action.choices:
            raise bad(f"one of {', '.join(map(str, action.choices))}")
        return value
    if isinstance(action.default, bool) or action.nargs == 0:
        if value.lower() not in TRUE + FALSE:
            raise bad("true or false")
        return value.lower() in TRUE
    try:
        return action.type(value) if action.type else value
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"--grid {text!r}: {key}: {exc}") from None
    except (TypeError, ValueError):
        raise bad(f"a valid {action.type.__name__}") from None


def config_id(params: dict) -> str:
    return hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ---- one configuration ----------------------------------------------------------------------------
def run_config(trace, base: dict, params: dict) -> dict:
    """Simulate one configuration; its row (params, config_id, status, error, summary figures). Never raises."""
    row = {**params, "config_id": config_id(params), "status": "ok", "error": ""}
    try:
        row.update(_simulate(trace, base, params))
    except Exception as exc:  # noqa: BLE001 - a failing configuration is a row, not the end of the sweep
        row.update(status="error", error=f"{type(exc).__name__}: {exc}")
    return row


def point_config(base: dict, params: dict):
    """One configuration's options and Configs as its run makes them: (opts, the paged Config, layout, the Config it
    runs: the paged one, or the contiguous layout's as replay's run_configs makes a baseline's). Raises what the config
    checks raise (FlagError, kv_cache_gib's OptionError)."""
    from pagesim.replay import config_from_args, run_configs

    opts = {**base, **{k: v for k, v in params.items() if k not in EXTRA_PARAMETERS}}
    if "kv_cache_gib" in params:  # the cache's size is given, as --num-gpu-blocks gives it: never the memory the
        # weights leave at --gpu-memory-utilization (a stand-in count while the block's bytes are learnt)
        probe = config_from_args(argparse.Namespace(**{**opts, "num_gpu_blocks": 1}))
        opts["num_gpu_blocks"] = blocks_for_gib(probe, params["kv_cache_gib"])
    config, layout = config_from_args(argparse.Namespace(**opts)), params.get("layout", "paged")
    return opts, config, layout, run_configs(config, [] if layout == "paged" else [layout])[-1]


def check_point(base: dict, params: dict) -> None:
    """Raise what one configuration's run would raise before it simulates anything: its Config (point_config), the
    contiguous layout's, its cost model against it (make_cost_model) and its replicas (cluster.check_replicas)."""
    from pagesim.cluster import check_replicas
    from pagesim.cost import make_cost_model

    opts, _, _, config = point_config(base, params)
    make_cost_model(opts["cost_model"], config)
    check_replicas(config, opts["replicas"])


def check_points(base: dict, points: list[dict], what: str = "sweep", keys=None) -> tuple[dict[str, str], str | None]:
    """Before any work (sweep, plan: `what`): every configuration's check_point. When all are refused, a UserError naming
    the grid's values (of `keys`, default every key: plan names its search's) and the first reason (none would run: no
    trace read, no Ray started). When some are: ({config_id: the warning} for run_sweep's `notes`, so their error rows
    record it; the warning as warning_lines prints it, "(K of N configurations): ..."); else ({}, None)."""
    refused = []
    for params in points:
        try:
            check_point(base, params)
        except Exception as exc:  # noqa: BLE001 - what run_config would make an error row of
            refused.append((params, exc))
    if not refused:
        return {}, None
    reasons = list(dict.fromkeys(str(exc) for _, exc in refused))
    reason = reasons[0] + (f" (the first of {len(reasons)} reasons; each row's error gives its own)"
                           if len(reasons) > 1 else "")
    if len(refused) == len(points):
        values = _values(points, list(points[0]) if keys is None else [k for k in keys if k in points[0]])
        raise UserError(f"every configuration of the {what}{f' ({values})' if values else ''} is refused by the config "
                        f"checks, so none would run: {reason}")
    text = (f"refused by the config checks before the {what} ran, so error rows ({_labels(points, [p for p, _ in refused])})"
            f": {reason}")
    return {config_id(p): text for p, _ in refused}, f"({len(refused)} of {len(points)} configurations): {text}"


def _values(points: list[dict], keys) -> str:
    """The values of each of `keys` in `points`: "block_size=8,16 kv_offloading_size=4"."""
    return " ".join(f"{k}={','.join(dict.fromkeys(shown(p[k]) for p in points))}" for k in keys)


def _labels(points: list[dict], some: list[dict], most: int = 4) -> str:
    """`some` of `points` in few words: each by the keys that tell them apart from the rest (a key is left out when
    `some` holds every point that differs from one of them in that key alone: block_size=100000 for every max_num_seqs
    of the grid is "block_size=100000"); at most `most` of them, then how many more."""
    ids = {config_id(p) for p in some}

    def rest(p, key):
        return tuple((k, shown(v)) for k, v in p.items() if k != key)

    keys = []
    for key in points[0]:
        held = {rest(p, key) for p in some}
        if any(rest(p, key) in held and config_id(p) not in ids for p in points):
            keys.append(key)
    labels = list(dict.fromkeys(" ".join(f"{k}={shown(p[k])}" for k in keys) for p in some))
    if labels == [""]:
        return "every configuration"
    return ", ".join(labels[:most]) + (f" and {len(labels) - most} more" if len(labels) > most else "")


def shown(value) -> str:
    """A grid value as --grid takes it: true, 4 (not 4.0: a table with error rows holds integer columns as floats),
    0.5, 1048576."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _simulate(trace, base: dict, params: dict) -> dict:
    from pagesim.cost import make_cost_model
    from pagesim.replay import simulate_run
    from pagesim.run_warnings import (baseline_warnings, cluster_warnings, config_warnings, profile_warnings,
                                      result_warnings, slo_warnings)
    from pagesim.slo import parse_slos

    opts, config, layout, run = point_config(base, params)
    slos = parse_slos(opts["slo"])
    warnings = (config_warnings(config, trace, swept=params, typed=opts.get("typed")) + baseline_warnings(config, [layout] if layout != "paged" else [])
                + profile_warnings(config, make_cost_model(opts["cost_model"], config))
                + cluster_warnings(config, opts["replicas"], opts["router"]) + slo_warnings(config, trace, slos))
    result, summary = simulate_run(trace, run, cost_model=opts["cost_model"], replicas=opts["replicas"],
                                   router=opts["router"], slos=slos)
    warnings += result_warnings(run.run_name, result.requests)  # and after it: too many requests rejected
    summary["num_gpu_blocks"] = run.resolved_num_gpu_blocks
    row = flatten(summary)
    row["warnings"] = "\n".join(warnings)  # the row's warnings, as replay prints them, one a line
    return row


def blocks_for_gib(config, gib: float) -> int:
    """How many of the config's KV blocks fit in `gib` GiB of K/V: the kv_cache_gib option's check, both bounds (one
    block; the simulator's MAX_SIMULATED_BLOCKS, the bound Config puts on --num-gpu-blocks) in its own words, an
    OptionError naming {kv_cache_gib} as sweep's other options' checks name theirs."""
    from pagesim.options import readable

    blocks = host_blocks(gib, config.block_bytes)  # (beyond a double's bytes, counted from whole GiB: not int(NaN))
    if blocks < 1:
        least = math.ceil(config.block_bytes / GIB * 100) / 100
        raise OptionError(f"{{kv_cache_gib}} {gib:,g} GiB holds no KV block of {config.block_size} tokens for "
                          f"{config.model} ({config.block_bytes / 2**20:g} MiB each)",
                          advice=f": expected at least {least:g} GiB (one block) at this block_size")
    if blocks > MAX_SIMULATED_BLOCKS:
        most = math.floor(MAX_SIMULATED_BLOCKS * config.block_bytes / GIB * 100) / 100
        raise OptionError(f"{{kv_cache_gib}} {gib:,g} GiB is {readable(blocks)} blocks of {config.block_size} tokens "
                          f"for {config.model} ({config.block_bytes / 2**20:g} MiB each); the simulator holds "
                          f"{SIMULATED_BLOCKS_LIMIT}",
                          advice=f": expected at most {most:,g} GiB at this block_size, or a larger block_size")
    return blocks


def flatten(summary: dict) -> dict:
    """Scalar figures of a summary; nested dicts become name_key (ttft_s_p99); lists are dropped."""
    out = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            out.update({f"{k}_{kk}": vv for kk, vv in v.items() if not isinstance(vv, (dict, list))})
        elif not isinstance(v, list):
            out[k] = v
    return out


# ---- the sweep --------------------------------------------------------------------------------------
def run_sweep(trace, base: dict, points: list[dict], out: Path | str, *, backend: str = "ray",
              address: str | None = None, num_cpus: int | None = None, progress: bool = True,
              on_row=None, notes: dict[str, str] | None = None) -> pd.DataFrame:
    """Run every point not already in out/results.parquet; returns the whole table (old rows and new).

    on_row(row, done, total) is called in this thread as each configuration finishes (done counts the
    configurations already in results.parquet too). Stopped by an exception (Ctrl-C, or one raised by
    on_row), the sweep writes the rows that finished, drops the configurations not started and re-raises.
    notes: config_id -> a warning its row's `warnings` records besides its own (check_points')."""
    if backend not in BACKENDS:
        raise UserError(f"--backend {backend!r}: expected {' or '.join(BACKENDS)}")
    out = Path(out)
    results = out / "results.parquet"
    check_or_write_manifest(out, trace, base)
    old = pd.read_parquet(results) if results.exists() else pd.DataFrame({"config_id": []})
    finished = set(old["config_id"])
    todo = [p for p in points if config_id(p) not in finished]
    writer = _Writer(results, old)
    from pagesim.progress import counted

    run = _run_ray if backend == "ray" else _run_local
    rows = run(trace, base, todo, address=address, num_cpus=num_cpus)
    with counted(None, len(points), "sweep", "config", initial=len(points) - len(todo), enabled=progress) as bar:
        done = len(points) - len(todo)
        try:
            for row in rows:
                if notes and row["config_id"] in notes:
                    row["warnings"] = "\n".join(w for w in (row.get("warnings"), notes[row["config_id"]]) if w)
                writer.add(row)
                done += 1
                bar.update(1)
                if on_row is not None:
                    on_row(row, done, len(points))
        except BaseException:  # interrupted (Ctrl-C, a dead driver): keep what finished, for the resume
            writer.close()
            raise
        finally:
            rows.close()  # now, not when the traceback is freed: the backend stops its pending work
    return writer.close()


def prepare_sweep_dir(out: Path | str, force: bool = False) -> Path:
    """--out before any work: a directory holding a sweep (sweep.json) resumes; any other must be new or empty."""
    from pagesim.outputs import prepare_output_dir

    path = given_path(out, "--out")
    if (path / "sweep.json").is_file():
        return path
    return prepare_output_dir(path, force)


NOT_FIXED = ("func", "argv", "typed", "command", "command_parser", "grid", "out", "force")  # not what the rows share


def check_or_write_manifest(out: Path, trace, base: dict) -> None:
    """sweep.json: what every row of this directory shares; a resume with other fixed options is refused."""
    from pagesim.results import trace_fingerprint

    fixed = {k: v for k, v in sorted(base.items()) if k not in NOT_FIXED}
    # The requests themselves, not only the file's name and row count: another --time-scale, --rate or window of
    # the same number of requests gives other arrivals, and rows simulated on those must not be reused.
    manifest = {"trace": trace.name, "rows": int(len(trace.df)), "trace_fingerprint": trace_fingerprint(trace),
                "fixed_options": fixed}
    path = out / "sweep.json"
    manifest = json.loads(json.dumps(manifest, default=str))
    if path.exists():
        previous = json.loads(path.read_text())
        previous["fixed_options"] = {k: v for k, v in previous.get("fixed_options", {}).items() if k not in NOT_FIXED}
        previous.setdefault("trace_fingerprint", manifest["trace_fingerprint"])  # written before it was recorded
        if previous != manifest:
            theirs, ours = previous.get("fixed_options", {}), manifest["fixed_options"]  # a key either lacks differs too
            diff = [k for k in {**ours, **theirs} if k not in theirs or k not in ours or theirs[k] != ours[k]]
            what = ", ".join(diff) or ("the trace" if previous.get("trace") != manifest["trace"] else
                                       "the trace's requests: another window, --limit, --time-scale or --rate")
            raise UserError(f"{out} holds a sweep with other fixed options ({what}); resume with the same command "
                            f"or choose another --out (--force does not start a sweep over: remove {out} for that)")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2))


class _Writer:
    """Rows to results.parquet: the table is rewritten (tmp file + rename) at most every FLUSH_S seconds."""

    def __init__(self, path: Path, old: pd.DataFrame):
        self.path, self.old, self.rows, self.last = path, old, [], time.monotonic()

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if time.monotonic() - self.last >= FLUSH_S:
            self.flush()

    def flush(self) -> pd.DataFrame:
        new = pd.DataFrame(self.rows)
        df = pd.concat([self.old, new], ignore_index=True) if len(self.old) else new
        if "error" in df:
            df["error"] = df["error"].fillna("").astype(str)
        tmp = self.path.with_suffix(".parquet.tmp")
        df.to_parquet(tmp, index=False)
        os.replace(tmp, self.path)
        self.last = time.monotonic()
        return df

    def close(self) -> pd.DataFrame:
        return self.flush() if self.rows or not self.path.exists() else self.old


# ---- backends ------------------------------------------------------------------------------------------
# Ray's start-up is a chain of process launches (GCS; the dashboard's API server, which ray.init waits for;
# raylet, which waits for its dashboard agent; then the driver, then the workers), mostly Python start-ups that
# compete for the CPUs: bench/ray_start.py times each step. What pagesim switches off (an explicit environment
# variable of the same name still wins):
RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",  # no usage-stats report (an outbound HTTP request from the API server)
    "RAY_enable_metrics_collection": "0",  # no metrics recorded and exported by GCS, raylet and workers
    "RAY_DISABLE_IMPORT_WARNING": "1",
    # Ray starts its workers at nice 15, below every other process of the machine; a sweep on a shared
    # machine then crawls. Ask for the ordinary priority.
    "RAY_worker_niceness": "0",
}


def start_ray(address: str | None = None, num_cpus: int | None = None):
    """ray.init for pagesim: a local instance of num_cpus CPUs (all by default), or the cluster at `address`;
    no dashboard (only the API server's minimal modules), no metrics, no usage stats, no worker logs on the
    driver's terminal. Returns the ray module."""
    import ray

    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)
    ray.init(address=address, num_cpus=None if address else num_cpus, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    return ray


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    """--backend, --address and --num-cpus, where a command's configurations run: `sweep`'s and `plan`'s, one
    definition. check_backend_options refuses the pairs that would ignore one of them, backend_args passes them to
    run_sweep, and start_ray starts (or connects to) Ray with them."""
    from pagesim.options import positive_int

    parser.add_argument("--backend", choices=BACKENDS, default="ray", help="ray or local processes")
    parser.add_argument("--address", default=None, help="Ray cluster address (default: start a local instance)")
    parser.add_argument("--num-cpus", type=positive_int, default=None, help="CPUs (workers) to use (default: all)")


def check_backend_options(args, command: str) -> None:
    """Before any work (`command`: sweep, plan): --address with --backend local, or with --num-cpus (start_ray passes
    num_cpus only to a local instance), would be ignored without a word; refused, naming both flags."""
    if args.address is not None and args.backend == "local":
        raise UserError(f"--address {args.address} names a Ray cluster, but --backend local runs the {command} in "
                        "local processes; drop --address, or --backend local")
    if args.address is not None and args.num_cpus is not None:
        raise UserError(f"--num-cpus {args.num_cpus} sizes the local Ray instance, but --address {args.address} runs "
                        f"the {command} on that cluster's CPUs; drop --num-cpus, or --address")


def backend_args(args) -> dict:
    """The add_backend_options values of `args`, as run_sweep's (and run_plan's) keyword arguments."""
    return {key: getattr(args, key) for key in BACKEND_OPTIONS}


def _run_ray(trace, base, points, *, address=None, num_cpus=None):
    import ray

    if not points:
        return
    started = not ray.is_initialized()
    if started:
        start_ray(address, num_cpus)
    pending = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_config)
        trace_ref = ray.put(trace)
        pending = {remote.remote(trace_ref, base, p): p for p in points}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                params = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as exc:  # the worker died (memory, signal): still a row
                    yield {**params, "config_id": config_id(params), "status": "error",
                           "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    finally:
        if started:
            ray.shutdown()
        else:  # interrupted on an instance that stays up (the dashboard's): its CPUs go back to other work
            for ref in pending:
                ray.cancel(ref)


_TRACE = None


def _set_trace(trace) -> None:
    global _TRACE
    _TRACE = trace


def _run_in_worker(base, params):
    return run_config(_TRACE, base, params)


def _run_local(trace, base, points, *, address=None, num_cpus=None):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    if not points:
        return
    workers = max(1, min(num_cpus or os.cpu_count() or 1, len(points)))
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_set_trace,
                               initargs=(trace,))
    try:
        futures = {pool.submit(_run_in_worker, base, p): p for p in points}
        for future in as_completed(futures):
            params = futures[future]
            try:
                yield future.result()
            except Exception as exc:  # a worker process died
                yield {**params, "config_id": config_id(params), "status": "error", "error": f"{type(exc).__name__}: {exc}"}
    finally:  # interrupted: configurations not started yet are dropped, not run to the end
        pool.shutdown(wait=True, cancel_futures=True)


# ---- CLI ----------------------------------------------------------------------------------------------------
def check_fixed_options(args, swept: dict[str, list], command: str) -> None:
    """Before any work (sweep, plan): --backend, --address and --num-cpus (check_backend_options); --baseline, which
    they do not run, and every cost-model file, the --cost-model one and each --grid cost_model=... value (`swept`:
    option -> its values), else each configuration with it would be an error row."""
    from pagesim.cost.profile import ProfileCostModel

    check_backend_options(args, command)
    if args.baseline:
        raise UserError(f"--baseline does not apply to {command}: sweep the layout instead, e.g. --grid layout=paged,max"
                        if command == "sweep" else f"--baseline does not apply to {command}")
    if args.cost_model != "roofline" and "cost_model" not in swept:
        ProfileCostModel.from_json(args.cost_model)
    for spec in dict.fromkeys(swept.get("cost_model", ())):
        if spec != "roofline":
            try:
                ProfileCostModel.from_json(spec)
            except UserError as e:
                raise UserError(f"--grid cost_model={spec}: {e}") from None


KV_MEMORY = ("num_gpu_blocks", "gpu_memory_utilization", "kv_cache_gib")  # three ways to size the KV cache: one at a time


def typed_options(args, parser, keys) -> dict[str, str]:
    """Of `keys`, the options the user typed (args.typed, cli.typed_dests: at their default value too; without it, those
    set to other than their default): key -> the flag as typed ("--block-size 32")."""
    actions = {a.dest: a for a in parser._actions}
    typed = getattr(args, "typed", None)
    out = {}
    for key in keys:
        action = actions.get(key)
        if action is None or (key not in typed if typed is not None else getattr(args, key, None) == action.default):
            continue
        value = getattr(args, key)
        if action.nargs == 0:  # a switch: --enable-prefix-caching, or --no-enable-chunked-prefill
            out[key] = next((f for f in action.option_strings if f.startswith("--no-") != bool(value)),
                            action.option_strings[-1])
        else:
            out[key] = f"{max(action.option_strings, key=len)} {value}"
    return out


def check_grid_against_options(args, parser, axes: dict[str, list]) -> None:
    """Before any work: an option typed on the command line that a --grid axis also sets would be replaced by the
    grid's values without a word, and the KV cache sized two ways (--num-gpu-blocks, --gpu-memory-utilization,
    kv_cache_gib) would keep one of them silently; both are refused, naming the flags."""
    typed = typed_options(args, parser, [k for k in axes if set(axes[k]) != {getattr(args, k, None)}])  # equal: harmless
    for key, flag in typed.items():
        values = ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in dict.fromkeys(axes[key]))
        raise UserError(f"{flag} and --grid {key}={values} both set {key}: the grid's values would replace the "
                        f"option; drop one of them")
    check_one_kv_size(args, parser, axes)


def check_one_kv_size(args, parser, axes) -> None:
    """The KV cache sized one way at most, by a typed option or by an axis of `axes` (sweep's grid, plan's search):
    two (--num-gpu-blocks, --gpu-memory-utilization, kv_cache_gib) would keep one of them silently, so are refused."""
    ways = [f"--grid {k}=..." for k in KV_MEMORY if k in axes]
    ways += list(typed_options(args, parser, [k for k in KV_MEMORY if k not in axes]).values())
    if len(ways) > 1:
        raise UserError(f"{' and '.join(ways)} both size the KV cache (one would be ignored); pass one of them")


def sweep(args, parser) -> int:
    from pagesim.replay import trace_from_args
    from pagesim.run_warnings import emit
    from pagesim.slo import parse_slos

    points = parse_grid(args.grid, parser)
    parse_slos(args.slo)  # bad --slo: an error now, not a thousand error rows
    axes = {k: [p[k] for p in points] for k in points[0]} if points else {}  # a product: every point has every key
    check_fixed_options(args, axes, "sweep")
    check_grid_against_options(args, parser, axes)
    base = {k: v for k, v in vars(args).items() if k not in NOT_SWEPT or k == "slo"}
    notes, refused = check_points(base, points)  # every configuration refused: an error now, not N error rows
    prepare_sweep_dir(args.out, getattr(args, "force", False))
    if refused:
        print(f"warning {refused}", file=sys.stderr)
    trace = trace_from_args(args)
    print(trace.summary.report())
    emit(trace.summary.warnings, [])  # the load's (stderr); each row records its configuration's own
    out = Path(args.out)
    try:
        df = run_sweep(trace, base, points, out, notes=notes, **backend_args(args))
    except KeyboardInterrupt:
        done = len(pd.read_parquet(out / "results.parquet")) if (out / "results.parquet").exists() else 0
        print(f"interrupted: {done} of {len(points)} configurations in {out / 'results.parquet'}; "
              "run the same command again to resume")
        return 130
    for line in warning_lines(df):
        if line != refused:  # printed before the configurations ran
            print(f"warning {line}", file=sys.stderr)
    errors = int((df["status"] == "error").sum()) if "status" in df else 0
    print(f"{len(df)} configuration{'s' if len(df) != 1 else ''} in {out / 'results.parquet'} "
          f"({errors} error{'s' if errors != 1 else ''})")
    if errors:
        print("first error:", df.loc[df["status"] == "error", "error"].iloc[0])
    return 0


def warning_lines(df: pd.DataFrame) -> list[str]:
    """The rows' warnings as sweep and plan print them (after "warning "): each kind once, "(K of N configurations):
    TEXT"."""
    if "warnings" not in df:
        return []
    return [f"({k} of {len(df)} configurations): {text}" for k, text in summarize_warnings(df["warnings"])]


def summarize_warnings(column: pd.Series) -> list[tuple[int, str]]:
    """Each kind of warning of the rows once, with how many configurations it applies to (most first): (count,
    text). Warnings that differ only in their figures (how many requests a configuration rejected, its block count)
    are one kind, shown by its first text, so a thousand configurations do not print a thousand lines."""
    texts = pd.Series([w for text in column.dropna() for w in str(text).split("\n") if w], dtype=object)
    if texts.empty:
        return []
    kinds = texts.str.replace(r"\d[\d,.]*", "#", regex=True)
    out = []
    for kind, k in kinds.value_counts(sort=True).items():
        alike = texts[kinds == kind]
        note = "" if alike.nunique() == 1 else " (figures differ by configuration: each row's own in its warnings column)"
        out.append((int(k), f"{alike.iloc[0]}{note}"))
    return out


def register(sub) -> None:
    from pagesim.replay import add_cluster_options, add_run_options

    p = sub.add_parser("sweep", help="simulate a trace over a grid of configurations (on Ray or local processes)")
    add_run_options(p)
    add_cluster_options(p)
    p.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="a swept option and its values (repeatable: the cross product is run)")
    add_backend_options(p)
    p.set_defaults(func=lambda args: sweep(args, p))
