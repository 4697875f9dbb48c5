"""engine.sm_clock: the SM clock through NVML, or nothing (never an error) where NVML is missing."""

from __future__ import annotations

import sys
import types

from engine.sm_clock import SmClock


def fake_pynvml(clock=1980, fail_read=False, fail_init=False):
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM = 1
    m.handles = []

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def by_uuid(uuid):
        m.handles.append(uuid)
        return ("h", uuid)

    def clock_info(handle, kind):
        if fail_read:
            raise RuntimeError("GPU is lost")
        assert kind == m.NVML_CLOCK_SM and handle[0] == "h"
        return clock

    m.nvmlInit, m.nvmlDeviceGetHandleByUUID, m.nvmlDeviceGetClockInfo = init, by_uuid, clock_info
    m.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    return m


def test_reads_the_devices_sm_clock_by_uuid(monkeypatch):
    fake = fake_pynvml(1755)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    c = SmClock("GPU-1234")
    assert c.available and c.read() == 1755 and fake.handles == ["GPU-1234"]
    assert SmClock(None, 3)._handle == ("h", 3)


def test_without_nvml_or_on_a_failed_read_the_clock_is_none(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: import fails
    assert not SmClock("GPU-1").available and SmClock("GPU-1").read() is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_init=True))
    assert SmClock("GPU-1").read() is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail_read=True))
    c = SmClock("GPU-1")
    assert c.available and c.read() is None
