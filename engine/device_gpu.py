"""Which of pagesim's GPU specs the CUDA device is, so a live run or a calibration is labelled with the card it ran on.

`--gpu` names the GPU a run is simulated as (pagesim.specs.GPUS: its memory, bandwidths and SM count); a live run or a
calibration also runs on a real device. Left out, the flag becomes the device's spec; given, it must be the device's
(a run on an H100 labelled h200 would be validated and compared as an H200's). A device that is none of the specs keeps
the flag (default h200) with a warning.
"""

from __future__ import annotations

from pagesim.errors import UserError
from pagesim.specs import DEFAULT_GPU, gpu_for_device


def device_gpu(given: str | None, command: str) -> tuple[str, list[str]]:
    """(the --gpu to run with, warnings) for `command` ("live" or "calibrate") on the current CUDA device."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    found = gpu_for_device(props.name, props.total_memory)
    if found is None:
        gpu = given or DEFAULT_GPU
        return gpu, [f"{command} runs on {props.name}, which is none of pagesim's GPU specs; the run is labelled "
                     f"--gpu {gpu} (its memory, bandwidths and SM count are that card's in the simulation)"]
    if given is not None and given != found:
        raise UserError(f"--gpu {given}: {command} runs on {props.name}, pagesim's {found}; pass --gpu {found} "
                        "(or leave --gpu out), so the run is labelled and simulated as the card it ran on")
    return found, []
