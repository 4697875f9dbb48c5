"""Every rejected input raises TraceError naming the file, the line and the field, and saying what was expected."""

from __future__ import annotations

import bz2
import gzip
import json

import pandas as pd
import pytest

from pagesim.errors import UserError
from pagesim.traces import TraceError, load_trace, trace_from_frame

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
OK_ROW = "2023-11-16 18:15:46.6805900,374,44\n"


def load_error(tmp_path, text: str | bytes, name: str = "conv.csv", **kwargs) -> TraceError:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(TraceError) as info:
        load_trace(path, **kwargs)
    assert info.value.file == str(path)
    return info.value


def assert_error(err: TraceError, row: int | None, field: str | None, expected: str) -> None:
    assert (err.row, err.field) == (row, field), str(err)
    assert expected in err.expected, str(err)
    message = str(err)
    assert message.startswith(err.file)
    if row is not None:
        assert f"line {row}" in message
    if field is not None:
        assert f"field {field!r}" in message
    assert f"expected {err.expected}" in message


def test_message_reads_file_line_field_expected_got(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW * 15 + "2023-11-16 18:15:47.0,abc,44\n")
    assert str(err) == f"{tmp_path / 'conv.csv'}, line 17, field 'ContextTokens': expected a positive integer, got 'abc'"
    assert isinstance(err, UserError)


@pytest.mark.parametrize(
    "row, field, expected",
    [
        ("2023-11-16 18:15:47.0,-5,44", "ContextTokens", "a positive integer"),
        ("2023-11-16 18:15:47.0,0,44", "ContextTokens", "a positive integer"),
        ("2023-11-16 18:15:47.0,12.5,44", "ContextTokens", "a positive integer"),
        ("2023-11-16 18:15:47.0,12,", "GeneratedTokens", "a positive integer"),
        ("2023-11-16 18:15:47.0,12,nan", "GeneratedTokens", "a positive integer"),
        ("2023-11-16 18:15:47.0,12,1e400", "GeneratedTokens", "a positive integer"),
        ("yesterday,12,3", "TIMESTAMP", "a timestamp like"),
        ("2023-13-45 99:00:00,12,3", "TIMESTAMP", "a timestamp like"),
        (",12,3", "TIMESTAMP", "a timestamp like"),
    ],
)
def test_bad_cells_name_line_and_column(tmp_path, row, field, expected):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + row + "\n" + OK_ROW)
    assert_error(err, 3, field, expected)


def test_empty_cell_is_reported_as_empty(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + "2023-11-16 18:15:47.0,,3\n")
    assert str(err).endswith("got an empty value")


def test_missing_column_names_the_column_and_the_header_line(tmp_path):
    err = load_error(tmp_path, "TIMESTAMP,ContextTokens\n2023-11-16 18:15:47.0,12\n", format="azure")
    assert_error(err, 1, "GeneratedTokens", "a column named 'GeneratedTokens'")


def test_ragged_row_names_its_line(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + OK_ROW + "2023-11-16 18:15:47.0,1,2,3,4\n")
    assert_error(err, 4, None, "as many comma-separated fields as the header")


@pytest.mark.parametrize("row, got", [("2023-11-16 18:15:47.0,12", 2), ("2023-11-16 18:15:47.0", 1)])
def test_row_with_fewer_fields_than_the_header_is_named_as_short(tmp_path, row, got):
    """Was: pandas filled the missing fields in as empty cells, and the message read "field 'GeneratedTokens':
    expected a positive integer, got an empty value" for a row that has no such field. Now it says the row is short."""
    err = load_error(tmp_path, "\n" + AZURE_HEADER + OK_ROW + row + "\n" + OK_ROW)
    assert str(err) == (f"{tmp_path / 'conv.csv'}, line 4: expected 3 comma-separated fields as the header has, "
                        f"got {got}")


def test_trailing_empty_field_that_is_there_is_an_empty_value_not_a_short_row(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + "2023-11-16 18:15:47.0,12,\n" + OK_ROW)
    assert str(err) == (f"{tmp_path / 'conv.csv'}, line 3, field 'GeneratedTokens': expected a positive integer, "
                        "got an empty value")


def test_short_row_missing_only_columns_the_format_does_not_read_is_read_as_before(tmp_path):
    """BurstGPT's Total tokens and Log Type are not read: a row without them is no error (it was none before)."""
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "1,ChatGPT,20,30,50,Conversation log\n2,ChatGPT,20,30\n")
    assert len(load_trace(path, format="burstgpt").df) == 2
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    "1,ChatGPT,20,30,50,Conversation log\n2,ChatGPT,20\n")
    with pytest.raises(TraceError) as info:
        load_trace(path, format="burstgpt")
    assert str(info.value) == f"{path}, line 3: expected 6 comma-separated fields as the header has, got 3"


def test_unbalanced_quote_names_its_line(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + '"2023-11-16 18:15:47.0,1,2\n')
    assert_error(err, 3, None, "balanced quotes")


@pytest.mark.parametrize("text", ["", "   \n\n"])
def test_empty_file_is_rejected_as_a_whole(tmp_path, text):
    assert_error(load_error(tmp_path, text), None, None, "a non-empty trace file")


def test_header_only_file_has_no_requests(tmp_path):
    assert_error(load_error(tmp_path, AZURE_HEADER), None, None, "at least one request")


def test_undecodable_bytes_name_their_line(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER.encode() + OK_ROW.encode() + b"\xff\xfe\x00garbage\n")
    assert_error(err, 3, None, "UTF-8 text")


def test_compressed_file_other_than_gzip_is_rejected(tmp_path):
    """gzip is read (test_trace_gzip.py); other compressions are binary files."""
    err = load_error(tmp_path, bz2.compress((AZURE_HEADER + OK_ROW).encode()), name="conv.csv.bz2")
    assert err.expected.startswith("UTF-8 text")
    err = load_error(tmp_path, gzip.compress(bz2.compress((AZURE_HEADER + OK_ROW).encode())), name="conv.csv.bz2.gz")
    assert err.expected.startswith("UTF-8 text")


def test_nul_bytes_are_rejected_as_binary(tmp_path):
    assert_error(load_error(tmp_path, AZURE_HEADER + OK_ROW + "1,\x00,2\n"), 3, None, "without NUL bytes")


def test_unknown_format_lists_the_known_ones(tmp_path):
    err = load_error(tmp_path, "time,input,output\n1,2,3\n")
    assert_error(err, 1, None, "a known trace format")
    assert "ContextTokens" in err.expected and "mooncake" in err.expected


def test_file_of_another_format_names_the_missing_column(tmp_path):
    mooncake = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
    assert_error(load_error(tmp_path, mooncake, format="vidur"), 1, None, "a CSV header with arrived_at")
    other = "time,num_prefill_tokens,num_decode_tokens\n0,10,5\n"
    assert_error(load_error(tmp_path, other, format="vidur"), 1, "arrived_at", "a column named 'arrived_at'")
    assert_error(load_error(tmp_path, AZURE_HEADER + OK_ROW, format="mooncake"), 1, None, "JSON (mooncake format")
    assert_error(load_error(tmp_path, "time,x\n1,2\n", format="mooncake"), 1, None, "valid JSON")  # no known CSV


def test_a_csv_format_given_another_csv_formats_file_names_the_files_format(tmp_path):
    """Was: `--format azure` on a Vidur file said only that the header has no TIMESTAMP, where a JSON format given a CSV
    trace (and a CSV format given JSON) names the file's own format."""
    vidur = "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n"
    err = load_error(tmp_path, vidur, format="azure")
    assert_error(err, 1, "TIMESTAMP", "a column named 'TIMESTAMP'")
    assert str(err).endswith("got the vidur header (pass --format vidur, or auto)")
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW, format="burstgpt")
    assert str(err).endswith("got the azure header (pass --format azure, or auto)")
    err = load_error(tmp_path, "time,num_prefill_tokens,num_decode_tokens\n0,10,5\n", format="vidur")
    assert str(err).endswith("(vidur format: arrived_at, num_prefill_tokens, num_decode_tokens)")  # of no format


def test_a_json_trace_read_as_csv_names_its_header_line_and_what_was_expected(tmp_path):
    """Was: mooncake or pagesim JSON lines under --format azure (burstgpt, vidur) whose lines hold different numbers of
    commas (hash_ids of other lengths) were refused at line 2 as 'expected as many comma-separated fields as the
    header has': a ragged row, not another format."""
    mooncake = ('\n{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]}\n'
                '{"timestamp": 5, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]}\n')
    for fmt, columns in (("azure", "TIMESTAMP, ContextTokens, GeneratedTokens"), ("vidur", "arrived_at,")):
        err = load_error(tmp_path, mooncake, name="m.jsonl", format=fmt)
        assert_error(err, 2, None, f"a CSV header with {columns}")
        assert err.expected.endswith("a JSON trace is mooncake, pagesim or sharegpt: pass its format, or auto)")
        assert str(err).endswith("got JSON")
    own = '{"pagesim_trace": 1, "name": "x", "hash_block_size": null}\n{"request_id": "a", "arrival_time_s": 0, "prompt_len": 3, "output_len": 4}\n'
    assert_error(load_error(tmp_path, own, name="p.jsonl", format="burstgpt"), 1, None, "a CSV header with Timestamp")


def test_a_csv_trace_read_as_json_names_its_header_and_its_format(tmp_path):
    """Was: an Azure (BurstGPT, Vidur) CSV under --format mooncake (pagesim, sharegpt) was refused as 'line 1: expected
    valid JSON (Expecting value at column 1)', which said neither what it was nor what to pass."""
    for fmt in ("mooncake", "pagesim", "sharegpt"):
        err = load_error(tmp_path, "\n" + AZURE_HEADER + OK_ROW, format=fmt)
        assert_error(err, 2, None, f"JSON ({fmt} format; a CSV trace is azure, burstgpt or vidur: pass its format, or auto)")
        assert str(err).endswith("got a CSV header of the azure format")


def test_unknown_json_keys_are_not_a_format(tmp_path):
    assert_error(load_error(tmp_path, '{"a": 1}\n', name="x.jsonl"), 1, None, "a known trace format")


def test_json_syntax_error_names_line_and_column(tmp_path):
    text = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 1, "input_length": 10,, "output_length": 5}\n'
    err = load_error(tmp_path, text, name="m.jsonl")
    assert_error(err, 2, None, "valid JSON")
    assert "column 37" in err.expected


def test_a_header_one_column_short_of_a_format_names_the_missing_column(tmp_path):
    err = load_error(tmp_path, "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n")
    assert_error(err, 1, "GeneratedTokens", "a CSV header with TIMESTAMP, ContextTokens, GeneratedTokens (azure format)")
    err = load_error(tmp_path, '{"timestamp": 0, "input_length": 10}\n', name="m.jsonl")
    assert_error(err, 1, "output_length", "the keys input_length, output_length, timestamp (mooncake format)")


def test_sharegpt_items_that_are_not_conversations_say_what_they_are(tmp_path):
    err = load_error(tmp_path, "[1, 2]", name="s.json")
    assert str(err).endswith("expected a conversation object with a list 'conversations', got a number, not an object")
    err = load_error(tmp_path, '[{"conversations": [{"from": "gpt", "value": "hi"}]}]', name="s.json")
    assert str(err).endswith("expected at least one request, got none (1 dropped: conversation without a human turn)")


def test_an_integer_beyond_the_limit_is_named_as_such(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + "2023-11-16 18:15:47.0,2147483648,44\n")
    assert str(err).endswith("field 'ContextTokens': expected a positive integer up to 2,147,483,647, got '2147483648'")


def test_a_sharegpt_num_tokens_beyond_the_limit_is_named_as_such(tmp_path):
    """Was: "expected a non-negative integer, got 1000000000000.0", which it is: the bound went unsaid."""
    text = '[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo", "num_tokens": 1e12}]}]'
    assert str(load_error(tmp_path, text, name="s.json")).endswith(
        "conversations[1].num_tokens': expected a non-negative integer up to 2,147,483,647, got 1000000000000.0")


def test_a_sharegpt_num_tokens_is_checked_in_the_other_json_readers_words(tmp_path):
    """A string count is named as one, as Mooncake's and pagesim's are ("... as a JSON number, not a string"); a
    fraction is not an integer, without an irrelevant bound; a whole JSON number (12.0) is read, as Mooncake reads it.
    Was: "expected a non-negative integer up to 2,147,483,647, got '12'" (which '12' is) and 12.0 refused."""
    def turns(n_tokens: str) -> str:
        return f'[{{"conversations": [{{"from": "human", "value": "hi", "num_tokens": {n_tokens}}}, {{"from": "gpt", "value": "yo"}}]}}]'

    assert str(load_error(tmp_path, turns('"12"'), name="s.json")).endswith(
        "conversations[0].num_tokens': expected a non-negative integer as a JSON number, not a string, got '12'")
    assert str(load_error(tmp_path, turns("12.5"), name="s.json")).endswith(
        "conversations[0].num_tokens': expected a non-negative integer, got 12.5")
    assert str(load_error(tmp_path, turns("-3"), name="s.json")).endswith(
        "conversations[0].num_tokens': expected a non-negative integer, got -3")
    (tmp_path / "ok.json").write_text(turns("12.0"))
    assert load_trace(tmp_path / "ok.json").df["prompt_len"].tolist() == [12]


def test_json_lines_field_errors_name_the_key(tmp_path):
    text = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n\n{"timestamp": 1, "input_length": "ten", "output_length": 5}\n'
    assert_error(load_error(tmp_path, text, name="m.jsonl"), 3, "input_length", "a positive integer")
    text = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 1, "input_length": 10}\n'
    assert_error(load_error(tmp_path, text, name="m.jsonl"), 2, "output_length", "the key on every line (it is required)")
    text = '{"timestamp": 0, "input_length": 10, "output_length": null}\n'
    assert_error(load_error(tmp_path, text, name="m.jsonl"), 1, "output_length", "a positive integer")
    text = ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": []}\n'
            '{"timestamp": 1, "input_length": 10, "output_length": 5}\n')
    err = load_error(tmp_path, text, name="m.jsonl")
    assert_error(err, 2, "hash_ids", "the key on every line, as on line 1 (an optional key appears on every line or on none)")
    assert str(err).endswith("got a line without it")
    text = '{"timestamp": 0, "input_length": 10, "output_length": 5}\n[1, 2]\n'
    assert_error(load_error(tmp_path, text, name="m.jsonl"), 2, None, "a JSON object on every line")


@pytest.mark.parametrize("name, header, record, line, field, kind", [
    ("m.jsonl", "", '{"timestamp": "5", "input_length": 10, "output_length": 5}', 2, "timestamp", "an arrival time"),
    ("m.jsonl", "", '{"timestamp": 5, "input_length": "10", "output_length": 5}', 2, "input_length", "a positive integer"),
    ("p.jsonl", '{"pagesim_trace": 1}\n', '{"request_id": "b", "arrival_time_s": "1", "prompt_len": 3, "output_len": 2}',
     3, "arrival_time_s", "an arrival time"),
    ("p.jsonl", '{"pagesim_trace": 1}\n', '{"request_id": "b", "arrival_time_s": 1, "prompt_len": 3, "output_len": "2"}',
     3, "output_len", "a positive integer"),
    ("p.jsonl", '{"pagesim_trace": 1}\n', '{"request_id": "b", "arrival_time_s": 1, "prompt_len": 3, "output_len": 2, '
     '"n": 1, "priority": "-1"}', 3, "priority", "an integer"),
])
def test_json_numbers_given_as_strings_name_line_and_field(tmp_path, name, header, record, line, field, kind):
    """Was: "123" in a JSON number's place loaded as 123 (pandas' to_numeric read it), where a string request id or a
    string in hash_ids is refused: JSON says what a value is."""
    first = {"m.jsonl": '{"timestamp": 0, "input_length": 10, "output_length": 5}',
             "p.jsonl": '{"request_id": "a", "arrival_time_s": 0, "prompt_len": 3, "output_len": 2'
                        + (', "n": 1, "priority": 0}' if "priority" in record else "}")}[name]
    err = load_error(tmp_path, header + first + "\n" + record + "\n", name=name)
    assert_error(err, line, field, f"{kind} as a JSON number, not a string")
    assert str(err).endswith(f"got {json.loads(record)[field]!r}")


def test_mooncake_hash_ids_must_match_the_prompt_length(tmp_path):
    text = '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1]}\n'
    assert_error(load_error(tmp_path, text, name="m.jsonl"), 1, "hash_ids", "2 or 3 ids, one per full 512-token block")
    # 1100 tokens: 2 full blocks and a partial one, whose id the file may carry (was "expected 2 ids", while 3 load)
    text = '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3, 4]}\n'
    err = load_error(tmp_path, text, name="m.jsonl")
    assert err.expected == ("2 or 3 ids, one per full 512-token block of the prompt, and optionally one more for its "
                            "partial last block") and str(err).endswith("got 4")
    text = '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, true, 3]}\n'
    assert_error(load_error(tmp_path, text, name="m.jsonl"), 1, "hash_ids", "a list of integers")


def test_sharegpt_errors_name_the_conversation_line_and_turn(tmp_path):
    text = '[\n {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},\n' \
           ' {"conversations": [{"from": "human", "value": "hi"}, {"from": "robot", "value": "yo"}]}\n]'
    assert_error(load_error(tmp_path, text, name="s.json"), 3, "conversations[1].from", "one of human")
    text = '[\n {"conversations": [{"from": "human", "value": 5}]}\n]'
    assert_error(load_error(tmp_path, text, name="s.json"), 2, "conversations[0].value", "a string")
    text = '[\n {"conversations": "nope"}\n]'
    assert_error(load_error(tmp_path, text, name="s.json"), 2, "conversations", "a list")
    text = '[\n {"conversations": []},\n {"conversations": []}\n}'
    assert_error(load_error(tmp_path, text, name="s.json"), 4, None, "',' or ']'")
    text = '[\n {"conversations": []},\n {"conversations": [}\n]'
    assert_error(load_error(tmp_path, text, name="s.json"), 3, None, "valid JSON")


def test_own_format_header_and_keys_are_checked(tmp_path):
    row = '{"request_id": "a", "arrival_time_s": 0, "prompt_len": 4, "output_len": 1}\n'
    assert_error(load_error(tmp_path, '{"pagesim_trace": 2}\n' + row, name="p.jsonl"), 1, "pagesim_trace", '"pagesim_trace": 1')
    bad_block = '{"pagesim_trace": 1, "hash_block_size": 0}\n'
    assert_error(load_error(tmp_path, bad_block + row, name="p.jsonl"), 1, "hash_block_size", "a positive integer")
    header = '{"pagesim_trace": 1, "name": "t", "hash_block_size": null}\n'
    typo = '{"request_id": "b", "arrival_time_s": 1, "prompt_len": 4, "output_len": 1, "promt_len": 3}\n'
    assert_error(load_error(tmp_path, header + row + typo, name="p.jsonl"), 3, "promt_len", "only the keys")
    assert_error(load_error(tmp_path, header + row + row, name="p.jsonl"), 3, "request_id", "a unique request id (also at line 2)")
    hashed = '{"request_id": "b", "arrival_time_s": 1, "prompt_len": 4, "output_len": 1, "prefix_hash_ids": []}\n'
    assert_error(load_error(tmp_path, header + hashed, name="p.jsonl"), None, "prefix_hash_ids", "a positive hash_block_size")
    assert_error(load_error(tmp_path, header + '{"request_id": 7, "arrival_time_s": 0, "prompt_len": 4, "output_len": 1}\n', name="p.jsonl"),
                 2, "request_id", "a non-empty string")


def test_trace_from_frame_names_the_frame_row_and_column():
    df = pd.DataFrame({"request_id": ["a", "b"], "arrival_time_s": [0.0, 1.0], "prompt_len": [3, 0], "output_len": [1, 2]})
    with pytest.raises(TraceError) as info:
        trace_from_frame(df, "my frame")
    assert_error(info.value, 2, "prompt_len", "a positive integer")
    with pytest.raises(TraceError, match="field 'output_len': expected a column"):
        trace_from_frame(df.drop(columns="output_len"), "my frame")
    with pytest.raises(TraceError, match="field 'ttft'"):
        trace_from_frame(df.assign(ttft=1.0), "my frame")


def test_an_empty_time_window_is_an_error(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW, start_s=10.0)
    assert_error(err, None, None, "at least one request arriving in the window [10, end) s (--start-s, --end-s); the trace's arrivals span [")


def test_rescaling_needs_arrivals_spread_over_time(tmp_path):
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + OK_ROW, rate=2.0)
    assert_error(err, None, None, "arrivals spread over time")


@pytest.mark.parametrize(
    "options", [dict(format="csv"), dict(limit=0), dict(time_scale=0), dict(rate=-1.0), dict(start_s=5, end_s=5), dict(end_s=float("nan"))]
)
def test_bad_options_are_user_errors(tmp_path, options):
    path = tmp_path / "conv.csv"
    path.write_text(AZURE_HEADER + OK_ROW)
    with pytest.raises(UserError):
        load_trace(path, **options)


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="expected a readable file"):
        load_trace(tmp_path / "absent.csv")
    with pytest.raises(TraceError, match="expected a readable file"):
        load_trace(tmp_path)


def test_errors_never_leak_other_exception_types_for_json_extremes(tmp_path):
    deep = '{"timestamp": ' + "[" * 100000 + "]" * 100000 + ', "input_length": 1, "output_length": 1}\n'
    assert load_error(tmp_path, deep, name="m.jsonl").row == 1
    huge = '{"timestamp": 0, "input_length": 1' + "0" * 5000 + ', "output_length": 1}\n'
    assert load_error(tmp_path, huge, name="m.jsonl").row == 1
    surrogate = '{"pagesim_trace": 1}\n{"request_id": "\\ud800", "arrival_time_s": 0, "prompt_len": 1, "output_len": 1}\n'
    assert_error(load_error(tmp_path, surrogate, name="p.jsonl"), 2, "request_id", "valid Unicode")
    assert json.loads(surrogate.splitlines()[1])["request_id"] == "\ud800"


def test_a_lone_cr_inside_a_row_of_an_lf_file_names_its_line_and_field(tmp_path):
    """Was: pandas broke the row at the CR, so the error named the next line and a field of the row's tail
    (`line 4, field 'TIMESTAMP': expected a timestamp ..., got '4'`), or the wrong field of the right line; a CR
    between two whole rows was read as a line break by the fast path, and every later line number was one too many."""
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + "2023-11-16 18:15:47.0,37\r4,44\n" + OK_ROW)
    assert_error(err, 3, "ContextTokens", "no carriage return (CR) inside a row")
    assert str(err).endswith("got '37\\r4'")
    burst = "Timestamp,Request tokens,Response tokens\n1.0,374,44\n"
    err = load_error(tmp_path, burst + "2.0,374,4\r4\n3.0,374,44\n")
    assert_error(err, 3, "Response tokens", "no carriage return (CR) inside a row")
    err = load_error(tmp_path, burst + "2.0,374,44\r3.0,374,44\n4.0,374,44\n")  # valid otherwise: the fast path's file
    assert_error(err, 3, "Response tokens", "no carriage return (CR) inside a row")
    assert str(err).endswith("got '44\\r3.0'")
    # the same file gzipped: the fast path notes its line ends as it decompresses (a plain file is scanned apart)
    err = load_error(tmp_path, gzip.compress((burst + "2.0,374,44\r3.0,374,44\n4.0,374,44\n").encode()), name="b.csv.gz")
    assert_error(err, 3, "Response tokens", "no carriage return (CR) inside a row")


def test_crs_that_break_no_row_still_load(tmp_path):
    """CR LF line ends, a CR inside a quoted cell and a CR after the last row are read as before."""
    burst = "Timestamp,Request tokens,Response tokens,Model\r\n1.0,374,44,\"a\rb\"\r\n2.0,374,44,x\n3.0,374,44,y\r"
    path = tmp_path / "b.csv"
    path.write_bytes(burst.encode())
    assert load_trace(path).df["prompt_len"].tolist() == [374, 374, 374]


def test_a_csv_field_beyond_the_csv_modules_limit_names_its_line(tmp_path):
    """Was: a header or first row with a field of over 131,072 characters ended in a traceback from the csv module
    ('_csv.Error: field larger than field limit (131072)')."""
    expected = "CSV fields of at most 131,072 characters (the csv module's limit)"
    assert_error(load_error(tmp_path, "x" * 200_000 + "\n1,2,3\n", format="azure"), 1, None, expected)
    err = load_error(tmp_path, AZURE_HEADER + "2023-11-16 18:15:46.1,10,5" + "y" * 200_000 + ",3,4\n")
    assert_error(err, 2, None, expected)
    assert str(err).endswith("got a longer one")
    err = load_error(tmp_path, AZURE_HEADER + OK_ROW + "2023-11-16 18:15:47.0,1\r0," + "5" * 200_000 + "\n")
    assert_error(err, 3, None, expected)


BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.mark.parametrize("blank", ["", "\n"], ids=["fast reader", "careful reader"])
def test_a_negative_burstgpt_timestamp_is_refused_as_other_offsets_are(tmp_path, blank):
    """BurstGPT's Timestamp is seconds from the trace's start, an offset as Vidur's, Mooncake's and pagesim's arrivals
    are: a negative one is a broken file, refused at its line (was: read, and the trace re-based on it without a word).
    A blank line sends the file to the careful reader, which must refuse it too."""
    text = BURSTGPT_HEADER + "5,ChatGPT,20,30,50,Conversation log\n" + blank + "-4.5,ChatGPT,20,30,50,Conversation log\n"
    err = load_error(tmp_path, text, name="burst.csv")
    assert str(err) == (f"{tmp_path / 'burst.csv'}, line {3 + len(blank)}, field 'Timestamp': expected a non-negative "
                        "offset in seconds from the trace start, got '-4.5'")


def test_a_key_given_twice_in_a_json_object_is_refused_by_name(tmp_path):
    """Was: json kept the last of two values silently, so a row's prompt length could change without a word. Every
    JSON reader (JSON lines, the own format's header and rows, a ShareGPT list's nested turns) names the key."""
    text = ('{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
            '{"timestamp": 1, "input_length": 10, "output_length": 5, "input_length": 99}\n')
    assert_error(load_error(tmp_path, text, name="m.jsonl"), 2, "input_length", "each key once in a JSON object")
    own = ('{"pagesim_trace": 1, "name": "x", "hash_block_size": null}\n'
           '{"request_id": "a", "arrival_time_s": 0, "prompt_len": 3, "output_len": 4, "output_len": 40}\n')
    assert_error(load_error(tmp_path, own, name="p.jsonl"), 2, "output_len", "each key once in a JSON object")
    nested = ('[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]},\n'
              ' {"conversations": [{"from": "human", "value": "a: b", "value": "c"}, {"from": "gpt", "value": "d"}]}]')
    assert_error(load_error(tmp_path, nested, name="s.json"), 2, "value", "each key once in a JSON object")


def test_colons_inside_json_strings_are_not_taken_for_keys(tmp_path):
    """The duplicate-key check counts colons first; a value holding one (a clock time, a URL) is checked again and
    read as it is."""
    text = ('{"request_id": "r:1", "arrival_time_s": 0, "prompt_len": 3, "output_len": 4}\n'
            '{"request_id": "http://x", "arrival_time_s": 1, "prompt_len": 5, "output_len": 6}\n')
    path = tmp_path / "p.jsonl"
    path.write_text('{"pagesim_trace": 1, "name": "x", "hash_block_size": null}\n' + text)
    assert load_trace(path).df["prompt_len"].tolist() == [3, 5]
