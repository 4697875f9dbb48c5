"""A live run or a calibration is labelled with the card it runs on: --gpu left out becomes the device's spec, a --gpu
that is not the device's is refused naming the flag, an unknown device keeps the flag with a warning."""

from __future__ import annotations

import types

import pytest

from engine import device_gpu as dg
from pagesim.errors import UserError
from pagesim.specs import DEFAULT_GPU, GPUS, gpu_for_device

GIB = 1024**3


@pytest.mark.parametrize("name, memory, spec", [
    ("NVIDIA H200", 141 * GIB, "h200"),
    ("NVIDIA H100 80GB HBM3", 80 * GIB, "h100"),
    ("NVIDIA H100 PCIe", 80 * GIB, None),  # 114 SMs and 2 TB/s: not the SXM board's spec
    ("NVIDIA H100 NVL", 94 * GIB, None),
    ("NVIDIA H200 NVL", 141 * GIB, None),
    ("NVIDIA A100-SXM4-80GB", 80 * GIB, "a100-80gb"),
    ("NVIDIA A100-SXM4-40GB", 40 * GIB, None),  # no 40 GB spec: not an 80 GB card's figures
    ("NVIDIA A100 80GB PCIe", 80 * GIB, None),
    ("NVIDIA L40S", 48 * GIB, None),
])
def test_device_names_map_to_their_spec(name, memory, spec):
    assert gpu_for_device(name, memory) == spec
    assert spec is None or spec in GPUS


def fake_device(monkeypatch, name: str, memory: int) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(name=name, total_memory=memory))


def test_left_out_gpu_becomes_the_devices_spec(monkeypatch):
    fake_device(monkeypatch, "NVIDIA H100 80GB HBM3", 80 * GIB)
    assert dg.device_gpu(None, "live") == ("h100", [])
    assert dg.device_gpu("h100", "live") == ("h100", [])


def test_a_gpu_flag_that_is_not_the_device_is_refused_naming_the_flag(monkeypatch):
    fake_device(monkeypatch, "NVIDIA H100 80GB HBM3", 80 * GIB)
    with pytest.raises(UserError, match=r"--gpu h200: calibrate runs on NVIDIA H100 80GB HBM3, pagesim's h100; "
                                        r"pass --gpu h100"):
        dg.device_gpu("h200", "calibrate")


def test_an_unknown_device_keeps_the_flag_with_one_warning(monkeypatch):
    fake_device(monkeypatch, "NVIDIA L40S", 48 * GIB)
    gpu, warnings = dg.device_gpu(None, "live")
    assert gpu == DEFAULT_GPU and len(warnings) == 1 and "NVIDIA L40S" in warnings[0]
    gpu, warnings = dg.device_gpu("a100-80gb", "live")
    assert gpu == "a100-80gb" and "--gpu a100-80gb" in warnings[0]


def test_live_leaves_gpu_to_the_device_and_replay_defaults_to_h200():
    import argparse

    from engine.live import register as register_live
    from pagesim.replay import add_run_options

    root = argparse.ArgumentParser()
    register_live(root.add_subparsers())
    assert root.parse_args(["live", "t.jsonl", "--out", "d"]).gpu is None
    assert root.parse_args(["live", "t.jsonl", "--out", "d", "--gpu", "h100"]).gpu == "h100"
    replay = argparse.ArgumentParser()
    add_run_options(replay)
    assert replay.parse_args(["t.jsonl", "--out", "d"]).gpu == "h200"
