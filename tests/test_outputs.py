"""pagesim.outputs: the output-path check every command runs before any work."""

from __future__ import annotations

import pytest

from pagesim.errors import UserError
from pagesim.outputs import prepare_output_dir, prepare_output_file


def test_dir_is_created_with_missing_parents(tmp_path):
    out = prepare_output_dir(tmp_path / "a" / "b")
    assert out.is_dir()


def test_existing_empty_dir_is_accepted(tmp_path):
    (tmp_path / "run").mkdir()
    assert prepare_output_dir(tmp_path / "run").is_dir()


def test_non_empty_dir_is_refused_unless_forced(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("{}")
    with pytest.raises(UserError, match=r"^--out .*run: directory exists and is not empty; pass --force"):
        prepare_output_dir(tmp_path / "run")
    assert prepare_output_dir(tmp_path / "run", force=True).is_dir()
    assert (tmp_path / "run" / "summary.json").exists()  # force never deletes


def test_dir_path_naming_a_file_or_under_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="is a file, not a directory"):
        prepare_output_dir(tmp_path / "f", force=True)
    with pytest.raises(UserError, match=r"^--results .*: a parent path is a file"):
        prepare_output_dir(tmp_path / "f" / "run", flag="--results")


def test_file_outputs(tmp_path):
    assert prepare_output_file(tmp_path / "new" / "t.jsonl") == tmp_path / "new" / "t.jsonl"
    assert (tmp_path / "new").is_dir()
    (tmp_path / "t.jsonl").write_text("x")
    with pytest.raises(UserError, match="file exists; pass --force"):
        prepare_output_file(tmp_path / "t.jsonl")
    prepare_output_file(tmp_path / "t.jsonl", force=True)
    with pytest.raises(UserError, match="is a directory"):
        prepare_output_file(tmp_path / "new")
    with pytest.raises(UserError, match="a parent path is a file"):
        prepare_output_file(tmp_path / "t.jsonl" / "x.jsonl")
