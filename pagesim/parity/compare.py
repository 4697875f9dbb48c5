"""pagesim and vLLM in lock step: the same requests released at the same steps, every step compared.

Arrivals are released by step, not by time (`release_steps`), so the
comparison does not depend on how long a step takes. When neither side has
work the step counter jumps to the next release (idle steps schedule nothing
on either side). A difference does not stop the run: both sides go on to the
end and every step is compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pagesim.config import Config
from pagesim.errors import UserError
from pagesim.parity.record import StepRecord
from pagesim.request import Request
from pagesim.scheduler import Scheduler


class PagesimSide:
    """pagesim's Scheduler stepped the way the oracle steps vLLM's."""

    def __init__(self, config: Config):
        self.scheduler = Scheduler(config)
        self.rejected: list[str] = []

    def add_request(self, req: Request) -> bool:
        ok = self.scheduler.add_request(req)
        if not ok:
            self.rejected.append(req.request_id)
        return ok

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def step(self, step: int) -> StepRecord:
        sched = self.scheduler
        plan = sched.schedule(float(step))
        rec = StepRecord(step=step, scheduled={s.request_id: s.num_new_tokens for s in plan.scheduled})
        rec.preempted = sorted(plan.preempted)
        admitted = set(plan.admitted)
        rec.admitted = {s.request_id: s.num_computed_tokens for s in plan.scheduled if s.request_id in admitted}
        outcome = sched.finish_step(plan, float(step))
        rec.finished = sorted(r.request_id for r in outcome.finished)
        rec.rejected, self.rejected = self.rejected, []
        rec.num_free_blocks = sched.kv.pool.num_free_blocks
        return rec


@dataclass(slots=True)
class ParityResult:
    config: dict
    n_steps_compared: int = 0
    n_steps_differing: int = 0
    first_difference: dict | None = None
    rows: list[dict] = field(default_factory=list)  # one per step: both sides and whether they differ
    stuck: str | None = None
    num_preemptions: int = 0  # vLLM side
    prefix_cache_queries: int = 0  # prompt tokens looked up at first admission (pagesim side)
    prefix_cache_hits: int = 0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0

    def summary(self) -> dict:
        return {
            "n_steps_compared": self.n_steps_compared,
            "n_steps_differing": self.n_steps_differing,
            "first_difference": self.first_difference,
            "stuck": self.stuck,
            "num_preemptions": self.num_preemptions,
            "prefix_hit_rate": round(self.prefix_hit_rate, 4),
            "config": self.config,
        }


def release_steps(requests: list[Request], step_s: float) -> list[int]:
    """Step at which each request is released: its arrival time in units of `step_s`."""
    if not step_s > 0:
        raise UserError(f"--step-s must be positive, got {step_s}")
    return [math.floor(r.arrival_time / step_s) for r in requests]


def check_parity_config(config: Config) -> None:
    """The subset of pagesim's options vLLM v1 has, and vLLM's own start-up check on cache size."""
    if config.kv_layout != "paged":
        raise UserError("parity compares the paged KV manager only (vLLM has no contiguous baseline)")
    if config.preemption_mode != "recompute":
        raise UserError("parity needs --preemption-mode recompute (vLLM v1 has no swap preemption)")
    if config.kv_offloading_size:
        raise UserError("parity needs --kv-offloading-size 0: the vLLM oracle runs without its offloading connector, "
                        "so pagesim's host-tier hits would be misses there (README, Memory hierarchy: how pagesim's "
                        "host tier follows vLLM's)")
    if config.max_num_batched_tokens < config.max_num_seqs:
        raise UserError(f"vLLM requires --max-num-batched-tokens ({config.max_num_batched_tokens}) >= "
                        f"--max-num-seqs ({config.max_num_seqs})")
    usable = config.resolved_num_gpu_blocks - 1  # vLLM reserves block 0 as its null block
    need = -(-config.resolved_max_model_len // config.block_size)
    if need > usable:
        raise UserError(
            f"max_model_len {config.resolved_max_model_len} needs {need} blocks but the cache has {usable} usable "
            f"blocks (--num-gpu-blocks {config.resolved_num_gpu_blocks} minus vLLM's null block): vLLM refuses to "
            "start with such a config; lower --max-model-len or raise --num-gpu-blocks"
        )


def run_parity(config: Config, make_requests, steps: list[int], max_idle_steps: int = 1000) -> ParityResult:
    """Replay the requests through both schedulers (policy `config.policy` on both); `make_requests()` gives a
    fresh list per side."""
    from pagesim.parity.oracle import VllmOracle

    check_parity_config(config)
    pg_reqs, vl_reqs = make_requests(), make_requests()
    if any(r.n > 1 for r in pg_reqs):
        raise UserError("parity needs n = 1 for every request (vLLM v1 forks n > 1 in the front end)")
    order = sorted(range(len(pg_reqs)), key=lambda i: (steps[i], i))
    pg, vl = PagesimSide(config), VllmOracle(config)
    result = ParityResult(config=config.to_dict())
    step, nxt, idle = 0, 0, 0
    while nxt < len(order) or pg.has_work() or vl.has_work():
        if not pg.has_work() and not vl.has_work():
            step = max(step, steps[order[nxt]])
        while nxt < len(order) and steps[order[nxt]] <= step:
            i = order[nxt]
            pg.add_request(pg_reqs[i])
            vl.add_request(vl_reqs[i])
            nxt += 1
        a, b = pg.step(step), vl.step(step)
        differs = a.compared() != b.compared()
        result.n_steps_compared += 1
        if differs:
            result.n_steps_differing += 1
            if result.first_difference is None:
                result.first_difference = {"step": step, "pagesim": a.compared(), "vllm": b.compared(),
                                           "fields": [k for k, v in a.compared().items() if b.compared()[k] != v]}
        result.rows.append({"step": step, "differs": differs, "pagesim": a.compared(), "vllm": b.compared()})
        idle = idle + 1 if not a.scheduled and not b.scheduled and nxt >= len(order) else 0
        if idle > max_idle_steps:
            result.stuck = f"neither side scheduled anything for {max_idle_steps} steps with work left"
            break
        step += 1
    result.num_preemptions = sum(len(r["vllm"]["preempted"]) for r in result.rows)
    stats = pg.scheduler.kv.prefix_cache_stats
    result.prefix_cache_queries, result.prefix_cache_hits = stats.queries, stats.hits
    return result
