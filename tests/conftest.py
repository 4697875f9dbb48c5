"""Shared test set-up.

Triton kernels run under the interpreter on machines without CUDA:
TRITON_INTERPRET must be set before triton is first imported, so it is done
here, before any test module imports engine.kernels.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _cuda_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The Sweep page keeps each view's results.parquet under PAGESIM_SWEEP_DIR and reruns nothing it finds there:
# every test session gets a fresh directory, so a test never passes on rows an earlier session left behind.
os.environ.setdefault("PAGESIM_SWEEP_DIR", tempfile.mkdtemp(prefix="pagesim-sweeps-test-"))

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = REPO.parent / "shared" / "traces"
AZURE_DIR = SHARED_TRACES / "azure2023"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if item.get_closest_marker("gpu") is not None and not HAS_CUDA:  # not `in keywords`: a folder named gpu matches
            item.add_marker(skip_gpu)


@pytest.fixture
def azure_dir() -> Path:
    """The shared Azure 2023 traces; tests using it skip when the folder is absent."""
    if not (AZURE_DIR / "AzureLLMInferenceTrace_conv.csv").exists():
        pytest.skip(f"shared traces not present at {AZURE_DIR}")
    return AZURE_DIR


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for the whole test session, bounded to the machine's 2 cores, started as
    pagesim.sweep starts one (no dashboard, metrics or usage stats: bench/ray_start.py times it)."""
    pytest.importorskip("ray")
    from pagesim.sweep import start_ray

    ray = start_ray(num_cpus=min(2, os.cpu_count() or 1))
    yield ray
    ray.shutdown()
