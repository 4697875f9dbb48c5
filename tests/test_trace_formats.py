"""Each supported trace format loads into the schema, by explicit name and by content detection."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pagesim.traces import load_trace, trace_from_frame, write_trace
from pagesim.traces.schema import COLUMNS

SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "system", "value": "s" * 40},
            {"from": "human", "value": "h" * 100},
            {"from": "gpt", "value": "g" * 400},
            {"from": "human", "value": "x" * 80},
            {"from": "gpt", "value": "y" * 30},
            {"from": "human", "value": "unanswered"},
        ],
    },
    {"id": "b", "conversations": [{"from": "human", "value": "hello", "num_tokens": 3}, {"from": "gpt", "value": "hi", "num_tokens": 7}]},
]

# (file name, explicit format, text): small valid files of every format. The names carry no format hint
# that matters: detection reads content.
SAMPLES = {
    "azure2023": ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
                  "2023-11-16 18:15:51.2224670,879,55\n"),
    "azure2024": ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2024-05-10 00:00:00.009930+00:00,2162,5\n2024-05-10 00:00:01+00:00,100,20\n"
                  "2024-05-10 00:00:02.5+00:00,300,7\n"),
    "burstgpt1": ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,API log\n"
                  "118,GPT-4,417,276,693,Conversation log\n"),
    "burstgpt2": ("burstgpt", "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                  "19440110.0,1722ac82-0a46-4bf0-aa08-89794e7a2b3f,43,GPT-4,906,446,1352,Conversation log\n"
                  "19440161.0,d5983bf9-4b48-497b-892b-a58995247443,2,ChatGPT,36,29,65,Conversation log\n"),
    "mooncake": ("mooncake", '{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}\n'
                 '{"timestamp": 0, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]}\n'
                 '{"timestamp": 3052, "input_length": 1024, "output_length": 794, "hash_ids": [0, 28]}\n'),
    "vidur": ("vidur", "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.3145,396,109\n4.5419,879,55\n"),
    "sharegpt": ("sharegpt", json.dumps(SHAREGPT, indent=1)),
    "pagesim": ("pagesim", '{"pagesim_trace": 1, "name": "tiny", "hash_block_size": 4}\n'
                '{"request_id": "r1", "arrival_time_s": 0.0, "prompt_len": 9, "output_len": 3, "prefix_hash_ids": [1, 2], "n": 2}\n'
                '{"request_id": "r2", "arrival_time_s": 0.5, "prompt_len": 4, "output_len": 1, "prefix_hash_ids": [1], "n": 1}\n'),
}


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def assert_schema(trace) -> None:
    """The invariants schema.py promises."""
    df = trace.df
    assert list(df.columns) == [c for c in COLUMNS if c in df.columns]
    assert df["arrival_time_s"].iloc[0] == 0.0
    assert (np.diff(df["arrival_time_s"]) >= 0).all()
    assert (df["prompt_len"] >= 1).all() and (df["output_len"] >= 1).all()
    assert df["request_id"].is_unique
    assert list(df.index) == list(range(len(df)))
    if "prefix_hash_ids" in df:
        assert [len(h) for h in df["prefix_hash_ids"]] == list(df["prompt_len"] // trace.hash_block_size)
    assert trace.summary.rows_kept == len(df)


@pytest.mark.parametrize("sample", SAMPLES)
def test_every_format_is_detected_from_content_and_loads_the_same_as_named(tmp_path, sample):
    fmt, text = SAMPLES[sample]
    path = write(tmp_path, "trace.txt", text)  # the extension says nothing
    auto, named = load_trace(path), load_trace(path, fmt)
    assert auto.summary.format == fmt
    assert_schema(auto)
    assert auto.df.equals(named.df)


def test_azure_2023_and_2024_timestamps_become_relative_seconds(tmp_path):
    t23 = load_trace(write(tmp_path, "a.csv", SAMPLES["azure2023"][1])).df["arrival_time_s"]
    assert t23.tolist() == pytest.approx([0.0, 4.314579, 4.541877])
    t24 = load_trace(write(tmp_path, "b.csv", SAMPLES["azure2024"][1])).df["arrival_time_s"]
    assert t24.tolist() == pytest.approx([0.0, 0.99007, 2.49007])


def test_burstgpt_failed_requests_are_dropped_and_counted(tmp_path):
    trace = load_trace(write(tmp_path, "b.csv", SAMPLES["burstgpt1"][1]))
    assert trace.df["prompt_len"].tolist() == [472, 417]
    assert trace.df["arrival_time_s"].tolist() == [0.0, 113.0]
    assert trace.summary.rows_read == 3
    assert trace.summary.dropped == {"failed request (Response tokens = 0)": 1}
    assert "dropped 1: failed request" in str(trace.summary)


def test_burstgpt_release_with_session_columns_loads(tmp_path):
    trace = load_trace(write(tmp_path, "b.csv", SAMPLES["burstgpt2"][1]))
    assert trace.df["output_len"].tolist() == [446, 29]
    assert trace.df["arrival_time_s"].tolist() == [0.0, 51.0]


def test_mooncake_keeps_one_hash_id_per_full_512_token_block(tmp_path):
    trace = load_trace(write(tmp_path, "m.jsonl", SAMPLES["mooncake"][1]))
    assert trace.hash_block_size == 512
    ids = trace.df["prefix_hash_ids"].tolist()
    assert [len(h) for h in ids] == [13, 14, 2]  # 6755 // 512, 7319 // 512, 1024 // 512 (exact: no partial id)
    assert ids[1][:3] == [0, 14, 15]
    assert trace.df["arrival_time_s"].tolist() == [0.0, 0.0, 3.052]


def test_sharegpt_turns_share_prefix_blocks_with_earlier_turns(tmp_path):
    trace = load_trace(write(tmp_path, "s.json", SAMPLES["sharegpt"][1]), rate=2.0, seed=1)
    df = trace.df.set_index("request_id")
    assert set(df.index) == {"0.0", "0.1", "1.0"}
    # ceil(chars / 4): system 10 + human 25 = 35; + gpt 100 + human 20 = 155; given counts 3 and 7.
    assert df.loc["0.0", "prompt_len"] == 35 and df.loc["0.0", "output_len"] == 100
    assert df.loc["0.1", "prompt_len"] == 155 and df.loc["0.1", "output_len"] == 8
    assert df.loc["1.0", "prompt_len"] == 3 and df.loc["1.0", "output_len"] == 7
    first, second = df.loc["0.0", "prefix_hash_ids"], df.loc["0.1", "prefix_hash_ids"]
    assert len(first) == 2 and second[:2] == first and len(second) == 155 // 16
    assert trace.summary.dropped == {"human turn without a gpt answer": 1}
    assert trace.summary.rows_read == 2
    # Later turns come THINK_TIME_S after earlier ones, so conversation b's turn slots in before a's second.
    assert trace.df["request_id"].tolist() == ["0.0", "1.0", "0.1"]


def test_sharegpt_arrivals_follow_rate_and_seed(tmp_path):
    conversations = [{"conversations": [{"from": "human", "value": "q" * i}, {"from": "gpt", "value": "a"}]} for i in range(1, 2001)]
    path = write(tmp_path, "s.json", json.dumps(conversations))
    a, b, c = load_trace(path, rate=4.0, seed=3), load_trace(path, rate=4.0, seed=3), load_trace(path, rate=4.0, seed=4)
    assert a.df.equals(b.df) and not a.df.equals(c.df)
    assert len(a.df) / a.summary.span_s == pytest.approx(4.0, rel=0.1)


def test_sharegpt_as_json_lines(tmp_path):
    text = "\n".join(json.dumps(c) for c in SHAREGPT)
    assert len(load_trace(write(tmp_path, "s.jsonl", text)).df) == 3


def test_own_format_keeps_name_block_size_and_optional_columns(tmp_path):
    trace = load_trace(write(tmp_path, "p.jsonl", SAMPLES["pagesim"][1]))
    assert trace.name == "tiny" and trace.hash_block_size == 4
    assert list(trace.df.columns) == ["request_id", "arrival_time_s", "prompt_len", "output_len", "prefix_hash_ids", "n"]
    assert trace.df["n"].tolist() == [2, 1]


def test_unsorted_arrivals_are_sorted_with_a_warning_naming_the_line(tmp_path):
    text = "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n5,2,2\n3,3,3\n"
    trace = load_trace(write(tmp_path, "v.csv", text))
    assert trace.df["prompt_len"].tolist() == [1, 3, 2]
    assert trace.df["request_id"].tolist() == ["0", "2", "1"]  # ids keep file order
    (warning,) = trace.summary.warnings
    assert "v.csv" in warning and "line 4" in warning and "sorted" in warning


def test_blank_lines_and_extra_columns_are_tolerated(tmp_path):
    text = "\n\nTIMESTAMP,ContextTokens,GeneratedTokens,Extra\n2023-11-16 18:15:46.68,1,2,x\n\n2023-11-16 18:15:47.68,3,4,y\n\n"
    trace = load_trace(write(tmp_path, "a.csv", text))
    assert trace.df["prompt_len"].tolist() == [1, 3]
    assert trace.summary.dropped == {"blank line": 2}
    # read = kept + dropped (it said "2 rows read, 2 requests kept, dropped 2: blank line"); the blank lines before
    # the header are not rows
    assert (trace.summary.rows_read, trace.summary.rows_kept) == (4, 2)


def test_trace_from_frame_validates_sorts_and_rebases():
    import pandas as pd

    df = pd.DataFrame({"request_id": ["a", "b"], "arrival_time_s": [7.0, 5.0], "prompt_len": [3, 4], "output_len": [1, 2]})
    trace = trace_from_frame(df, "built")
    assert trace.df["request_id"].tolist() == ["b", "a"]
    assert trace.df["arrival_time_s"].tolist() == [0.0, 2.0]
    assert trace.summary.warnings


def test_write_trace_output_is_compact_json_lines(tmp_path):
    trace = load_trace(write(tmp_path, "m.jsonl", SAMPLES["mooncake"][1]))
    out = tmp_path / "out.jsonl"
    write_trace(trace, out)
    lines = out.read_text().splitlines()
    assert json.loads(lines[0]) == {"pagesim_trace": 1, "name": "m", "hash_block_size": 512}
    assert len(lines) == 4 and " " not in lines[1]
