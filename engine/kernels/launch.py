"""A Triton launch that can be issued again without Triton's per-call binding (issue #13: launch-bound mixed steps).

`kernel[grid](...)` binds every argument, computes what the kernel is specialised on and looks the compiled
variant up on each call. On the H200 machine's host that costs ~90 us a launch with the attention wrappers' own
Python (`python3 -m bench.mixed_graph_gaps`, 2026-12-02), and a graphed mixed step makes two such launches per
layer between its graph pieces: 64 tokens with 64 decode rows spent 11 ms issuing work the GPU ran in 6.7 ms.

A `Launch` holds one kernel launch: the JIT function, its grid, every argument in signature order and its options.
`run()` launches it once through Triton (the one-off wrappers, the eager forward pass). Called, it launches through
Triton the first time a key is seen (compiling if needed, so the compile counter and Triton's own caches see it) and
keeps the compiled kernel's launcher under a key at least as fine as Triton's (each tensor's dtype and 16-byte
alignment; each integer's value class: 1, divisible by 16, 32-bit; constexprs by value; the grid and options); later
calls with the same key go straight to that launcher. `Launch(...)(*swapped)` replaces the arguments named by `swap`
first (a step's attention launches differ between layers only in the layer's cache and scales), so a step builds
its launches once and issues them per layer; `adapt`, where given, maps what the caller swaps in (the layer's caches
and scales) to the kernel's own arguments (the Gluon prefill's TMA descriptors of the layer's caches).

Under TRITON_INTERPRET every call is a plain `kernel[grid](...)`.
"""

from __future__ import annotations

import os

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
# The arguments of an attention launch that differ between a step's layers, in the order a Launch swaps them.
LAYER_ARGS = ("k_cache", "v_cache", "k_scale", "v_scale")
_RUNNERS: dict = {}  # launch key -> {swapped arguments' key -> the compiled kernel's launcher for the grid}


def _spec(value, constexpr: bool):
    """What Triton specialises a kernel on for one argument, or finer."""
    if constexpr:
        return value
    if isinstance(value, torch.Tensor):
        return value.dtype, value.data_ptr() % 16 == 0
    if isinstance(value, bool):
        return "b", value
    if isinstance(value, int):
        return "i", value == 1, value % 16 == 0, -(2**31) <= value < 2**31
    if isinstance(value, float):
        return "f"
    if hasattr(value, "block_shape") and hasattr(value, "base"):  # a TMA descriptor (Gluon kernels)
        return "desc", value.base.dtype, tuple(value.block_shape), repr(value.layout), value.base.data_ptr() % 16 == 0
    return value


class Launch:
    """One launch of a @triton.jit (or @gluon.jit) kernel: `run()` launches it through Triton; calls re-issue it
    cheaply, with the `swap` arguments replaced (module docstring)."""

    __slots__ = ("fn", "grid", "args", "options", "swap_at", "adapt", "runners", "stream")

    def __init__(self, fn, grid: tuple, args: dict, options: dict, swap: tuple[str, ...] = (), adapt=None):
        names = fn.arg_names
        if set(args) != set(names):
            raise TypeError(f"{fn!r}: arguments {sorted(set(names) ^ set(args))} missing or unknown")
        self.fn, self.grid, self.options = fn, tuple(grid) + (1,) * (3 - len(grid)), options
        self.args = [args[n] for n in names]
        self.swap_at = tuple(names.index(n) for n in swap)
        self.adapt = adapt  # maps the values a caller swaps in (a layer's caches and scales) to the kernel's own
        self.runners = self.stream = None  # made on the first call (a launch that is only run() never keys itself)

    def run(self) -> None:
        """Launch once, through Triton (what a one-off call such as paged_decode_attention does)."""
        self.fn[self.grid](*self.args, **self.options)

    def __call__(self, *swapped) -> None:
        """Launch, with the `swap` arguments replaced by `swapped` (in order) when given, through the launcher kept
        for this key (Triton's own launch the first time a key is seen)."""
        args = self.args
        if self.adapt is not None and swapped:
            swapped = self.adapt(*swapped)
        for i, value in zip(self.swap_at, swapped):
            args[i] = value
        if INTERPRET:  # an InterpretedFunction: no compiled variants to key
            self.fn[self.grid](*args, **self.options)
            return
        if self.runners is None:
            from triton.runtime import driver

            fixed = tuple(_spec(a, p.is_constexpr) for i, (a, p) in enumerate(zip(args, self.fn.params))
                          if i not in self.swap_at)
            # the launchers of this launch's key, by the swapped arguments' key (a step's layers)
            self.runners = _RUNNERS.setdefault((self.fn, self.grid, tuple(sorted(self.options.items())), fixed), {})
            self.stream = driver.active.get_current_stream(driver.active.get_current_device())
        key = tuple(_spec(args[i], False) for i in self.swap_at)
        runner = self.runners.get(key)
        if runner is None:
            compiled = self.fn[self.grid](*args, **self.options)
            self.runners[key] = compiled[self.grid]
        else:
            runner(*args, stream=self.stream)
