"""Long-prompt, prefix-heavy windows for the live check (issue 13): never seen by any calibration.

Each request reads one of a few long shared documents (a prefix-cache hit after its first reader),
followed by its own question; prompts average over 8k tokens, the longest near 30k, so they need
a long-context model (llama-3.1-8b) and max_model_len 32768. Seeded: the same command writes the
same file.

    python -m bench.long_context_windows --out-dir traces [--force]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from pagesim.errors import UserError
from pagesim.outputs import prepare_output_file
from pagesim.traces import trace_from_frame, write_trace
from pagesim.traces.blocks import BlockIds
from pagesim.traces.synth import LogNormal, Uniform, arrival_times

WINDOWS = {
    # name: (requests, rate req/s, gamma cv, documents, document lengths, question, output, seed)
    "longdoc-a": (120, 3.0, 1.0, 6, Uniform(6000, 14000), LogNormal(900, 600, 4000), LogNormal(160, 110, 600), 11),
    "longdoc-b": (90, 2.2, 2.0, 10, Uniform(4000, 26000), LogNormal(1200, 700, 4000), LogNormal(200, 120, 800), 12),
}


def window(name: str):
    n, rate, cv, docs, doc_len, question, output, seed = WINDOWS[name]
    rng = np.random.default_rng(seed)
    blocks = BlockIds(16)
    lengths = doc_len.sample(rng, docs)
    weights = 1 / np.arange(1, docs + 1)  # a few popular documents, a long tail
    choice = rng.choice(docs, n, p=weights / weights.sum())
    questions = question.sample(rng, n)
    prompts = [blocks.prompt().extend(("doc", int(k)), int(lengths[k])).extend(("q", i), int(q))
               for i, (k, q) in enumerate(zip(choice, questions))]
    df = pd.DataFrame({"request_id": [f"{name}-{i}" for i in range(n)],
                       "arrival_time_s": arrival_times(rng, n, rate, cv),
                       "prompt_len": [p.n_tokens for p in prompts], "output_len": output.sample(rng, n),
                       "prefix_hash_ids": [p.hash_ids for p in prompts]})
    return trace_from_frame(df, name, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default="traces")
    parser.add_argument("--force", action="store_true", help="replace existing trace files (the committed ones too)")
    args = parser.parse_args()
    try:
        paths = {name: prepare_output_file(Path(args.out_dir) / f"{name}.jsonl", args.force, "--out-dir")
                 for name in WINDOWS}
    except UserError as exc:
        parser.error(str(exc))
    for name, path in paths.items():
        trace = window(name)
        write_trace(trace, path)
        df = trace.df
        print(f"{path}: {len(df)} requests over {df['arrival_time_s'].max():.1f} s, prompt mean "
              f"{df['prompt_len'].mean():.0f} / max {df['prompt_len'].max()}, output mean {df['output_len'].mean():.0f}")


if __name__ == "__main__":
    main()
