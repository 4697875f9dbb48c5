"""Counting Triton kernel variants built in this process (compiled, or loaded from Triton's on-disk cache).

Each new specialization of a @triton.jit kernel (constexprs, integer values of 1 or divisible by 16,
pointer alignment) is built on its first launch, which stalls that step for milliseconds (disk
cache hit) to over a second (a fresh compile). Live mode warms every variant a run can need
before the first arrival and records how many were still built during the measured run (target 0).

The count comes from triton.knobs.runtime.jit_post_compile_hook (Triton >= 3.4), chained with any
hook already installed; with an older Triton it is None (unknown).
"""

from __future__ import annotations


class CompileCounter:
    """`with CompileCounter() as c: ...` -> c.count variants built inside the block (None: not countable)."""

    def __init__(self):
        self.count: int | None = None
        self.kernels: list[str] = []
        self._runtime = self._previous = None

    def __enter__(self) -> "CompileCounter":
        try:
            import triton

            runtime = triton.knobs.runtime
            getattr(runtime, "jit_post_compile_hook")
        except (ImportError, AttributeError):
            return self
        self._runtime, self._previous, self.count = runtime, runtime.jit_post_compile_hook, 0

        def hook(*args, **kwargs):
            self.count += 1
            fn = kwargs.get("fn")
            self.kernels.append(getattr(fn, "name", "?"))
            return self._previous(*args, **kwargs) if self._previous is not None else None

        runtime.jit_post_compile_hook = hook
        return self

    def __exit__(self, *exc) -> None:
        if self._runtime is not None:
            self._runtime.jit_post_compile_hook = self._previous
