"""The dashboard's colours, one meaning each.

Memory states (DESIGN.md's six words, plus the block map's shared prefix blocks) have one colour in
every chart and in the block map; runs have colours from a darker family that no state uses; request
queues are greys told apart by dash. A request in the block map gets a hue from its number in the
trace (golden-angle hues, so requests that run together differ), and its hover names it.
"""

from __future__ import annotations

import colorsys

from pagesim.accounting import CATEGORIES

# Memory states, bottom to top of the stacked memory chart: label and colour.
STATES = {
    "used": ("used", "#4caf50"),
    "reserved": ("reserved", "#ffd54f"),
    "internal_fragmentation": ("internal fragmentation", "#ff9e80"),
    "external_fragmentation": ("external fragmentation", "#d32f2f"),
    "cached": ("cached", "#81d4fa"),
    "free": ("free", "#eeeeee"),
}
assert set(STATES) == set(CATEGORIES)
SHARED = "#fff176"  # a prefix block held by more than one request (a used block, lit brighter)
WAITING_FREE = "#bdbdbd"  # free slots while requests wait: the next admission does not fit (watermark)
PREEMPTION = "#212121"

# The host (CPU) tier of the prefix cache: its blocks' states (a cached prefix is "cached" on either tier),
# and the tier a prompt token's prefix-cache lookup was answered from.
HOST_STATES = {
    "storing": ("storing (GPU → host)", "#b39ddb"),
    "loading": ("loading (host → GPU)", "#80cbc4"),
    "cached": ("cached prefix", STATES["cached"][1]),
    "free": ("free", STATES["free"][1]),
}
HIT_TIERS = {"gpu": ("GPU hit", "#1e88e5"), "host": ("host hit", "#26a69a"), "miss": ("miss (computed)", "#9e9e9e")}

# Runs: dark, saturated hues (no green, amber, salmon, red or light blue), stable by name.
RUNS = {"paged": "#283593", "contiguous-max": "#00838f", "contiguous-pow2": "#8e24aa",
        "contiguous-oracle": "#795548", "live": "#283593", "simulated": "#00838f"}
MORE_RUNS = ["#283593", "#00838f", "#8e24aa", "#795548", "#37474f", "#827717", "#ad1457", "#4e342e",
             "#0277bd", "#880e4f"]
SLO = "#212121"  # threshold lines
TRACE = "#546e7a"  # the trace's own charts (arrivals, prompt and output lengths): blue grey, neither a state nor a run

# Request queues (one panel per run): greys told apart by dash.
QUEUES = {"num_running": ("running", "#212121", "solid"), "num_waiting": ("waiting", "#757575", "dash"),
          "num_swapped": ("swapped", "#212121", "dot")}


def run_color(name: str, index: int = 0) -> str:
    """The colour of a run: fixed for the known run names, else the index-th of MORE_RUNS."""
    return RUNS.get(name) or MORE_RUNS[index % len(MORE_RUNS)]


def request_color(index: int) -> str:
    """The colour of the index-th request of a trace: golden-angle hues (any run of consecutive requests,
    those that run together, gets well-spread hues) at three lightnesses; the same in every snapshot."""
    hue = (0.58 + index * 0.6180339887) % 1.0  # starting from blue
    light = (0.42, 0.55, 0.32)[index % 3]
    r, g, b = colorsys.hls_to_rgb(hue, light, 0.65)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
