"""engine: the real GPU side of pagesim.

- engine.kernels: Triton kernels for the paged KV cache (store, decode and prefill attention,
  block copy and swap); they run under Triton's interpreter without CUDA.
- engine.model: a Llama-style decoder built from a pagesim ModelSpec, on those kernels.
- engine.tokens: deterministic token ids for traces without text, consistent with the
  scheduler's prefix-cache keys.
- engine.executor: GPUExecutor, which executes the shared scheduler's step plans
  (`execute(plan) -> seconds`, the engine's side of pagesim.loop.run_step).

Nothing is imported here: `import engine` stays cheap, and torch loads only with a submodule.

CUDA module loading is EAGER unless the environment says otherwise (CUDA_MODULE_LOADING, read when CUDA first
initialises, so it is set here, before any submodule touches CUDA). PyTorch's default is LAZY: a kernel's module
(a cuBLAS GEMM picked for a token count not met before, an elementwise variant) is loaded the first time the kernel
runs, which stalls the host while the GPU waits. On an H200, eager steps of 1-2k tokens took 49-53 ms the first
time and 25-37 ms afterwards (bench/eager_jitter.py, 2026-12-02): in a live run those first times fall inside the
measured run, at whatever step first meets a shape, and neither the warm-up nor the calibration can name every shape.
"""

import os

os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
