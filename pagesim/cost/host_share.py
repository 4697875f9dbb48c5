"""How much of a decode step's time the host took, in a calibration and in a live run (issue #13, round 48).

A step's device time (`gpu_time_s`, between the executor's two CUDA events) holds the host's queueing of the step's
work (`queue_host_s`: the GPU is idle when a step starts, so it waits for it); the rest of its duration
(`duration_s` less `gpu_time_s`: scheduling, the sync, recording) is off the device. A profile prices a decode
step from its calibration's durations, host time included; a run whose host was faster or slower than its
calibration's (the host's speed moves with the moment: docs/accuracy-history.md, round 48) has its decode steps
priced high or low by about the difference. `decode_host_shares` measures it the same way on both sides (the
profile records its calibration's at the fit: `fit["decode_host"]`), and `run_decode_split` splits a run's graph
decode level (measured over predicted, summed) into its device part and that host difference:
level = device x (1 - calibration host share) / (1 - run host share), a host share being the time off the device
and, where both sides recorded it, the queueing within it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagesim.cost.graphs import runs_decode_graph

if TYPE_CHECKING:
    import pandas as pd

HOST_COLUMNS = ("num_prefill_tokens", "num_decode_seqs", "duration_s", "gpu_time_s", "queue_host_s")  # what they read


def decode_host_shares(steps: "pd.DataFrame", max_graph_batch: int) -> dict | None:
    """Over the graph decode steps (pagesim.cost.graphs.runs_decode_graph, with the largest decode graph's batch
    `max_graph_batch`) of a calibration's rows or a run's steps (duration_s, gpu_time_s, and queue_host_s since round
    47): their count, the share of their summed duration spent off the device, and the share the host's queueing took
    within the device time (None without queue_host_s). None without device times (a CPU run)."""
    if "gpu_time_s" not in steps:
        return None
    graph = runs_decode_graph(steps["num_prefill_tokens"], steps["num_decode_seqs"], max_graph_batch)
    return _shares(steps[graph & steps["gpu_time_s"].notna()])


def _shares(d: "pd.DataFrame") -> dict | None:
    """decode_host_shares over the rows `d`, all of them graph decode steps with device times (None for none)."""
    if d.empty:
        return None
    duration = float(d["duration_s"].sum())
    queue = d["queue_host_s"] if "queue_host_s" in d else None
    return {"steps": int(len(d)), "off_device_share": 1 - float(d["gpu_time_s"].sum()) / duration,
            "queue_share": float(queue.sum()) / duration if queue is not None and queue.notna().all() else None}


def level_split(measured_s: float, predicted_s: float, run_share: float, calibration_share: float | None) -> dict:
    """A run's graph decode level (summed measured / predicted seconds) and, with the calibration's host share,
    its device part and the host's: level = device x host, where device = measured x (1 - run share) / (predicted x
    (1 - calibration share)) (the run's device seconds against what the profile fitted as device time) and host =
    (1 - calibration share) / (1 - run share)."""
    out = {"level": measured_s / predicted_s}
    if calibration_share is not None:
        out["device"] = measured_s * (1 - run_share) / (predicted_s * (1 - calibration_share))
        out["host"] = (1 - calibration_share) / (1 - run_share)
    return out


def run_decode_split(table: "pd.DataFrame", run_steps: "pd.DataFrame", calibration: dict | None) -> dict | None:
    """A run's graph decode level split into its device part and its host part (level_split) against its profile's
    calibration's decode_host_shares (`calibration`; None: the level alone). `table`: its steps' kind, measured_s and
    predicted_s by step (validate's step table), `run_steps` their gpu_time_s and queue_host_s by step. The host
    share, on both sides alike, is the time off the device plus, when both sides recorded it (round 47 on), the host's
    queueing within the device time (`queueing_counted`): the device then waited for the host. None without graph
    decode steps or device times."""
    if "gpu_time_s" not in run_steps:
        return None
    cols = ["step", "gpu_time_s"] + (["queue_host_s"] if "queue_host_s" in run_steps else [])
    d = table[table["kind"] == "graph decode"].merge(run_steps[cols], on="step", validate="one_to_one")
    d = d[d["gpu_time_s"].notna()]
    if d.empty:
        return None
    run = _shares(d.rename(columns={"measured_s": "duration_s"}))
    queueing = run["queue_share"] is not None and calibration is not None and calibration.get("queue_share") is not None

    def host_share(shares: dict) -> float:
        return shares["off_device_share"] + (shares["queue_share"] if queueing else 0.0)

    run_share = host_share(run)
    calibration_share = None if calibration is None else host_share(calibration)
    out = level_split(float(d["measured_s"].sum()), float(d["predicted_s"].sum()), run_share, calibration_share)
    out.update(steps=run["steps"], queueing_counted=queueing, run_host_share=run_share,
               calibration_host_share=calibration_share, run_off_device_share=run["off_device_share"],
               run_queue_share=run["queue_share"],
               calibration_off_device_share=None if calibration is None else calibration["off_device_share"],
               calibration_queue_share=None if calibration is None else calibration.get("queue_share"))
    return out
