"""engine: the real GPU side of pagesim.

- engine.kernels: Triton kernels for the paged KV cache (store, decode and prefill attention,
  block copy and swap); they run under Triton's interpreter without CUDA.
- engine.model: a Llama-style decoder built from a pagesim ModelSpec, on those kernels.
- engine.tokens: deterministic token ids for traces without text, consistent with the
  scheduler's prefix-cache keys.
- engine.executor: GPUExecutor, which executes the shared scheduler's step plans
  (`execute(plan) -> seconds`, the engine's side of pagesim.loop.run_step).

Nothing is imported here: `import engine` stays cheap, and torch loads only with a submodule.
"""
