"""Multi-replica simulation: N engines behind a router, on one simpy clock.

Each replica has its own Scheduler, KV-cache manager, executor and recorder
(a `Simulation`'s) and runs the one driver loop (`pagesim.loop.drive`) as a
process on the cluster's shared simpy environment; the cluster's `arrivals`
process is the router: at each arrival it picks a replica and queues the
request there. Every replica's loop sees the cluster's next arrival time, so
its fast path stops where the step-by-step loop would meet an arrival (a
request may be routed to it) and an idle replica wakes at each arrival.

Routers (the load a router sees is a replica's outstanding tokens: the prompt
and generated tokens of its unfinished requests, what their KV cache holds or
will hold; the true output length is not used):

- `round-robin`: replica i % N for the i-th request;
- `least-outstanding-tokens`: the replica with the fewest outstanding tokens;
- `prefix-aware`: the replica whose KV cache holds the longest prefix of the
  request (the KV manager's own prefix-cache lookup, `get_computed_blocks`),
  ties by load, in the manner of llm-d's and Dynamo's KV-aware routers. With
  prefix caching off it is least-outstanding-tokens.

Conservation: every request is routed to exactly one replica and ends there
finished or rejected (`SchedulerStuck` otherwise); each replica's blocks
balance (its `leaked_blocks` is 0 at the end).

Size: at most MAX_REPLICAS replicas (options.replica_count bounds --replicas),
whose blocks together stay within the simulator's limit for one engine
(config.MAX_SIMULATED_BLOCKS): `check_replicas`, before any replica is built
(a sweep's or plan's configuration that fails it is an error row).
"""

from __future__ import annotations

import dataclasses
import time
from itertools import chain

import pandas as pd
import simpy

from pagesim.config import BYTES_PER_SIMULATED_BLOCK, MAX_SIMULATED_BLOCKS, Config
from pagesim.errors import UserError
from pagesim.kv_manager import PrefixCacheStats
from pagesim.loop import SchedulerStuck, SimClock, drive
from pagesim.metrics import summarize_run
from pagesim.options import MAX_REPLICAS
from pagesim.request import Request, in_arrival_order, requests_from_trace
from pagesim.scheduler import Scheduler
from pagesim.simulator import RunResult, Simulation
from pagesim.utils import paused_gc

ROUTERS = ("round-robin", "least-outstanding-tokens", "prefix-aware")


def check_replicas(config: Config, replicas: int) -> None:
    """A UserError naming --replicas when the simulator cannot hold `replicas` replicas of `config`: more than
    MAX_REPLICAS (the flag's own bound), or their blocks together (GPU, host blocks in swap mode, the host tier's) beyond
    MAX_SIMULATED_BLOCKS, the limit of one engine (Config)."""
    blocks = config.resolved_num_gpu_blocks
    if config.preemption_mode == "swap":
        blocks = max(blocks, config.num_cpu_blocks)
    if config.enable_prefix_caching:
        blocks = max(blocks, config.num_offload_blocks)
    most = min(MAX_REPLICAS, MAX_SIMULATED_BLOCKS // max(blocks, 1))
    if replicas > most:
        raise UserError(f"--replicas {replicas:,}: {replicas:,} replicas of {blocks:,} blocks each hold "
                        f"{replicas * blocks:,} blocks, beyond the {MAX_SIMULATED_BLOCKS:,} the simulator holds (~"
                        f"{MAX_SIMULATED_BLOCKS * BYTES_PER_SIMULATED_BLOCK / 1e9:.1f} GB of memory); expected at most "
                        f"{most:,} replicas of this configuration, or fewer blocks each (--num-gpu-blocks, a larger "
                        "--block-size)")


def outstanding_tokens(sched: Scheduler) -> int:
    return sum(r.prompt_len + r.num_output_tokens for r in chain(sched.waiting, sched.running, sched.swapped))


def route_round_robin(request: Request, scheds: list[Scheduler], seq: int) -> int:
    return seq % len(scheds)


def route_least_outstanding_tokens(request: Request, scheds: list[Scheduler], seq: int) -> int:
    return min(range(len(scheds)), key=lambda i: (outstanding_tokens(scheds[i]), i))


def route_prefix_aware(request: Request, scheds: list[Scheduler], seq: int) -> int:
    hits = [s.kv.get_computed_blocks(request)[1] for s in scheds]
    return min(range(len(scheds)), key=lambda i: (-hits[i], outstanding_tokens(scheds[i]), i))


ROUTE = {
    "round-robin": route_round_robin,
    "least-outstanding-tokens": route_least_outstanding_tokens,
    "prefix-aware": route_prefix_aware,
}


class _RoutedArrivals:
    """What one replica's driver loop (pagesim.loop.drive) sees of the arrivals.

    The cluster's router process queues each request on its replica at its arrival time, so there is
    nothing to release here; `next_time` is the cluster's next arrival (a fast-path run stops before
    it, an idle replica wakes at it: a request may be routed to it), and the arrivals are exhausted
    once the router has routed the last request.
    """

    def __init__(self, cluster: "ClusterSimulation"):
        self.cluster = cluster

    @property
    def exhausted(self) -> bool:
        return self.cluster.next_index >= len(self.cluster.requests)

    def next_time(self) -> float:
        return self.cluster.next_time()

    def release(self, sched: Scheduler, now: float) -> None:
        pass


class ClusterSimulation:
    def __init__(self, requests: list[Request], config: Config, cost_model, *, num_replicas: int,
                 router: str = "round-robin", fast_path: bool = True, progress=None):
        if router not in ROUTE:
            raise ValueError(f"unknown router {router!r}; expected one of {ROUTERS}")
        check_replicas(config, num_replicas)  # before any replica is built
        self.env = simpy.Environment()
        self.requests = in_arrival_order(requests)
        self.config = config
        self.router = router
        self.fast_path = cost_model if fast_path else None
        # Each replica: its own scheduler, KV cache, executor and recorder (a Simulation's), on the shared clock.
        self.replicas = [Simulation([], config, cost_model, clock=SimClock(self.env)) for _ in range(num_replicas)]
        self.routed: list[list[Request]] = [[] for _ in range(num_replicas)]
        self.next_index = 0  # the next request to route
        self.progress = progress  # progress(now) as each request is routed (replay's bar: sim_progress)

    def next_time(self) -> float:
        i = self.next_index
        return self.requests[i].arrival_time if i < len(self.requests) else float("inf")

    def arrivals(self):
        """The router: each request, at its arrival time, to the replica the routing rule picks."""
        env = self.env
        scheds = [r.scheduler for r in self.replicas]
        route = ROUTE[self.router]
        for i, req in enumerate(self.requests):
            if req.arrival_time > env.now:
                yield env.timeout(req.arrival_time - env.now)
            k = route(req, scheds, i)
            self.routed[k].append(req)
            scheds[k].add_request(req)
            self.next_index = i + 1
            if self.progress is not None:
                self.progress(env.now)

    def engine(self, k: int):
        rep = self.replicas[k]
        return (yield from drive(rep.scheduler, rep.executor, rep.recorder, _RoutedArrivals(self), rep.clock,
                                 fast_path=self.fast_path))

    def run(self, name: str | None = None) -> RunResult:
        wall = time.perf_counter()
        self.env.process(self.arrivals())
        engines = [self.env.process(self.engine(k)) for k in range(len(self.replicas))]
        with paused_gc():
            self.env.run()
        wall = time.perf_counter() - wall
        unfinished = [r for r in self.requests if not r.is_finished]
        if unfinished:
            raise SchedulerStuck(f"{len(unfinished)} requests neither finished nor rejected")
        parts = [self._replica_result(k, wall) for k in range(len(self.replicas))]
        return RunResult(
            name=name or self.config.run_name,
            config=self.config,
            steps=pd.concat([p.steps.assign(replica=k) for k, p in enumerate(parts)], ignore_index=True),
            requests=pd.concat([p.requests.assign(replica=k) for k, p in enumerate(parts)], ignore_index=True),
            snapshots=[],
            sim_wall_s=wall,
            num_steps=sum(p.num_steps for p in parts),
            leaked_blocks=sum(p.leaked_blocks for p in parts),
            prefix_cache=PrefixCacheStats(*(sum(getattr(p.prefix_cache, f.name) for p in parts)
                                            for f in dataclasses.fields(PrefixCacheStats))),
            extra={"num_replicas": len(parts), "router": self.router,
                   "fast_path_steps": sum(e.value.fast_path_steps for e in engines),
                   "replicas": [summarize_run(p) for p in parts]},
        )

    def _replica_result(self, k: int, wall: float) -> RunResult:
        rep = self.replicas[k]
        sched = rep.scheduler
        steps = rep.recorder.steps_frame()
        own = self.routed[k] + [r for r in sched.finished if r.parent_id is not None]
        return RunResult(
            name=f"replica-{k}", config=self.config, steps=steps, requests=rep.recorder.requests_frame(own),
            snapshots=[], sim_wall_s=wall, num_steps=len(steps), leaked_blocks=sched.leaked_blocks(),
            prefix_cache=sched.kv.prefix_cache_stats,
        )


def simulate_cluster(trace, config: Config, cost_model=None, *, num_replicas: int, router: str,
                     **kwargs) -> RunResult:
    """Replay a trace over `num_replicas` replicas of `config` behind `router`; fresh request state every call."""
    if cost_model is None:
        from pagesim.cost import make_cost_model

        cost_model = make_cost_model("roofline", config)
    sim = ClusterSimulation(requests_from_trace(trace), config, cost_model, num_replicas=num_replicas,
                            router=router, **kwargs)
    return sim.run()
