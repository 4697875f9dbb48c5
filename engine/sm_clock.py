"""The GPU's SM clock, read through NVML while a step runs (GPUExecutor.last_sm_clock_mhz).

The executor reads it right after the step's work is queued, while the GPU runs it and the host would otherwise
wait, so the read (a few microseconds) costs the step nothing. Calibration rows and live steps record it as
`sm_clock_mhz`, so a profile's steps and a run's can be compared at the same clock (bench/decode_bias.py). Without
NVML (nvidia-ml-py not installed, no driver) `read()` returns None and the column is empty.
"""

from __future__ import annotations


class SmClock:
    """NVML's current SM clock of one CUDA device, in MHz."""

    def __init__(self, device_uuid: str | None, device_index: int = 0):
        self._handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            # By UUID, which CUDA_VISIBLE_DEVICES does not renumber; by index when torch gives none.
            self._handle = (pynvml.nvmlDeviceGetHandleByUUID(device_uuid) if device_uuid
                            else pynvml.nvmlDeviceGetHandleByIndex(device_index))
            self._get, self._sm = pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM
        except Exception:  # noqa: BLE001 - no pynvml, no driver, an unknown UUID: the clock is simply not recorded
            self._handle = None

    @property
    def available(self) -> bool:
        return self._handle is not None

    def read(self) -> int | None:
        if self._handle is None:
            return None
        try:
            return int(self._get(self._handle, self._sm))
        except Exception:  # noqa: BLE001 - a failed read leaves one step without its clock, never the run
            return None


def cuda_sm_clock(device) -> SmClock:
    """The SmClock of a torch CUDA device."""
    import torch

    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    return SmClock(f"GPU-{uuid}" if uuid is not None else None, device.index or 0)
