"""bench/decode_level_head.py on a committed live run: the head's level and the rest's ratio as defined."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
RUN = ROOT / "results/live/kshot-prefix-pressure-r31h"


def test_head_level_divides_the_rest_by_the_heads_median():
    import decode_level_head

    r = decode_level_head.head_level(RUN, 100)
    steps = pd.read_parquet(RUN / "validation" / "validation_steps.parquet")
    decode = steps[steps["kind"] == "graph decode"].sort_values("step")
    head, rest = decode.iloc[:100], decode.iloc[100:]
    assert r["head_level"] == pytest.approx((head.measured_s / head.predicted_s).median())
    total = rest.measured_s.sum() / rest.predicted_s.sum()
    assert r["rest_error_after"] == pytest.approx(abs(total / r["head_level"] - 1))
    assert decode_level_head.head_level(RUN, len(decode)) is None  # too few steps after the head


def test_result_file_is_written_once_and_not_replaced(tmp_path, capsys):
    import decode_level_head

    out = tmp_path / "r.json"
    assert decode_level_head.main([str(RUN), "--head", "100", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["runs"] == 1
    with pytest.raises(SystemExit):
        decode_level_head.main([str(RUN), "--out", str(out)])
    assert "file exists" in capsys.readouterr().err
