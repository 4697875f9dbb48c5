"""Traces: read public LLM-serving trace formats, validate them, synthesize and record traces.

    load_trace(path, format="auto", ...) -> Trace     any supported file (load.py)
    trace_from_frame(df, name) -> Trace               validate a frame built in code (schema.py)
    write_trace(trace, path)                          the own JSON-lines format (own_format.py)
    synth.synthesize(preset, ...) -> Trace            synthetic workloads (synth.py)
    stats.trace_stats(trace) -> dict                  summary statistics (stats.py)
"""

from pagesim.traces.errors import TraceError
from pagesim.traces.load import FORMATS, load_trace
from pagesim.traces.own_format import write_trace
from pagesim.traces.schema import LoadSummary, Trace, trace_from_frame

__all__ = ["FORMATS", "LoadSummary", "Trace", "TraceError", "load_trace", "trace_from_frame", "write_trace"]
