"""The block map: every physical KV block of a run's cache as a cell, at one instant.

Coloured by owner (a request keeps its hue across snapshots and runs: palette.request_color of its
number in the trace; blocks allocated ahead of their tokens pale) or by memory state (the memory
chart's colours). BlockSnapshot frames in (pagesim.recorder), plotly figures out.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagesim.dashboard.figures import header, time_label
from pagesim.dashboard.palette import SHARED, STATES, request_color

def _lighten(color: str, amount: float = 0.65) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in (r, g, b))


BLOCK_MAP_WIDTH = 64
MAX_BLOCKS_DRAWN = 64 * 128
FREE, CACHED, USED, RESERVED = (STATES[k][1] for k in ("free", "cached", "used", "reserved"))
STATE_LEGEND = {"used (holds tokens)": USED, "reserved ahead (allocated, no tokens yet)": RESERVED,
                "shared prefix (ref_cnt > 1)": SHARED, "cached prefix (free, reusable)": CACHED, "free": FREE}
REQUEST_LEGEND = {"owned by a request (a colour per request; hover names it)": "#5c6bc0",
                  "reserved ahead (the request's colour, pale)": _lighten("#5c6bc0"),
                  "shared prefix (ref_cnt > 1)": SHARED, "cached prefix (free, reusable)": CACHED, "free": FREE}


def block_codes(blocks: pd.DataFrame, by: str = "request") -> tuple[np.ndarray, list[str]]:
    """(colour code of each block of a BlockSnapshot frame, the colours the codes index).

    Codes 0 free, 1 cached, 2 shared; by "state": 3 used, 4 reserved; by "request": 3 + 2k the k-th
    request in the view, 4 + 2k the same request's blocks that hold no token yet (pale). A request's
    colour follows its number in the trace (palette.request_color), so it keeps it across snapshots and
    runs, and requests that run together get different hues."""
    owner = blocks["request_id"].astype(str).to_numpy()
    owned = owner != ""
    empty = blocks["fill"].to_numpy() == 0
    codes = np.where(blocks["cached"].to_numpy(), 1, 0)
    if by == "state":
        colors = [FREE, CACHED, SHARED, USED, RESERVED]
        codes = np.where(owned, np.where(empty, 4, 3), codes)
    else:
        ids = np.unique(owner[owned])
        palette = [request_color(request_index(r)) for r in ids]
        colors = [FREE, CACHED, SHARED, *(c for p in palette for c in (p, _lighten(p)))]
        k = np.searchsorted(ids, owner).clip(0, max(len(ids) - 1, 0))
        codes = np.where(owned, 3 + 2 * k + empty, codes)
    codes = np.where(owned & (blocks["ref_cnt"].to_numpy() > 1), 2, codes)
    return codes, colors


def request_index(request_id: str) -> int:
    """A request's number in its trace: the id's leading integer (a parallel sample "12.1" is 12's),
    else a hash of the id."""
    head = request_id.split(".")[0]
    return int(head) if head.isdigit() else zlib.crc32(request_id.encode())


def colorscale(colors: list[str]) -> list:
    n = len(colors)
    scale = []
    for i, c in enumerate(colors):
        scale += [[i / n, c], [(i + 1) / n, c]]
    return scale


def block_maps(snapshots: dict[str, pd.DataFrame], block_size: int, time_s: float | None = None,
               width: int = BLOCK_MAP_WIDTH, max_blocks: int = MAX_BLOCKS_DRAWN, *, by: str = "request",
               notes: dict[str, str] | None = None, time_text: str | None = None) -> go.Figure:
    """Every physical KV block as a cell, `width` per row, coloured by owner (by="request") or by memory
    state (by="state", the memory chart's colours); one panel per run. notes: run -> text added to its title;
    time_text: `time_s` as the title writes it (the time slider's label; default figures.time_label).

    snapshots: run name -> BlockSnapshot.to_frame(). At most `max_blocks` blocks per run are drawn."""
    names = list(snapshots)
    notes = notes or {}
    rows_per_map = [max(1, -(-min(len(f), max_blocks) // width)) for f in snapshots.values()]
    fig = make_subplots(rows=len(names), cols=1, vertical_spacing=0.08 if len(names) > 1 else 0,
                        subplot_titles=[f"{n} ({len(f):,} blocks" + (f", first {max_blocks:,} drawn" if len(f) > max_blocks else "")
                                        + ")" + notes.get(n, "") for n, f in snapshots.items()],
                        row_heights=rows_per_map)
    for row, (run, frame) in enumerate(snapshots.items(), 1):
        f = frame.iloc[:max_blocks]
        codes, colors = block_codes(f, by)
        cells = rows_per_map[row - 1] * width
        pad = cells - len(f)
        z = np.concatenate([codes.astype(float), np.full(pad, np.nan)]).reshape(-1, width)
        text = np.concatenate([_hover(f, block_size), np.full(pad, "")]).reshape(-1, width)
        fig.add_trace(go.Heatmap(z=z, text=text, hoverinfo="text", colorscale=colorscale(colors), zmin=-0.5,
                                 zmax=len(colors) - 0.5, showscale=False, xgap=1, ygap=1, name=f"blocks: {run}"),
                      row=row, col=1)
        fig.update_yaxes(autorange="reversed", showticklabels=False, ticks="", showgrid=False, zeroline=False,
                         row=row, col=1)
        fig.update_xaxes(showticklabels=False, ticks="", showgrid=False, zeroline=False, row=row, col=1)
    for label, color in (STATE_LEGEND if by == "state" else REQUEST_LEGEND).items():
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=label,
                                 marker=dict(symbol="square", size=12, color=color, line=dict(width=1, color="#999"))))
    when = "" if time_s is None else f" at t = {time_text or time_label(time_s)}"
    header(fig, f"Physical KV blocks{when} ({width} per row)",
            140 + sum(max(r, 4) * 14 for r in rows_per_map) + 40 * len(names))
    fig.update_layout(plot_bgcolor="white", margin=dict(l=20, r=20, b=20))
    return fig


def _hover(f: pd.DataFrame, block_size: int) -> np.ndarray:
    rid = f["request_id"].astype(str).to_numpy(dtype=object)
    owner = np.where(rid == "", np.where(f["cached"].to_numpy(), "free, cached prefix", "free"), "request " + rid)
    fill = np.where(rid == "", "", "<br>" + _strings(f["fill"]) + f"/{block_size} slots hold tokens")
    shared = np.where(f["ref_cnt"].to_numpy() > 1, "<br>shared by " + _strings(f["ref_cnt"]) + " requests", "")
    return ("block " + _strings(f["block_id"]) + "<br>" + owner + fill + shared).astype(object)


def _strings(values: pd.Series) -> np.ndarray:
    return values.astype(str).to_numpy(dtype=object)
