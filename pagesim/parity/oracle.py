"""vLLM v1's own Scheduler and KVCacheManager as an oracle: no model, no GPU, fake runner outputs.

Built the way vLLM's tests/v1/core build it: a local Llama `config.json` (so
`ModelConfig` never contacts a hub), `DeviceConfig("cpu")`, the number of
blocks set by hand, one full-attention KV-cache group, requests hashed with
vLLM's own block hasher. Each step is `schedule()` then `update_from_output()`
with one sampled token for every request whose prompt is done (none for a
partial prefill chunk). Requests end only by `max_tokens` or `max_model_len`
(`ignore_eos`).

Tokens: vLLM hashes token ids, pagesim hashes per-block content keys
(`Request.block_content_key`). Each full prompt block gets `block_size` copies
of one interned id for its pagesim key, and every other token (a prompt's
partial tail, every sampled token) an id unique to the request, so two blocks
are equal for vLLM exactly when they are equal for pagesim.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from vllm.config import (  # noqa: E402
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request as VllmRequest  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

# vLLM's logger may be left unconfigured here (no handler: Python's last-resort handler prints its warnings, such as
# the missing compiled '_C' ops the CPU oracle never uses); only its errors matter to parity
logging.getLogger("vllm").setLevel(logging.ERROR)

from pagesim.config import Config  # noqa: E402
from pagesim.parity.record import StepRecord  # noqa: E402
from pagesim.request import Request  # noqa: E402

SAMPLED_TOKEN_BASE = 1 << 30  # sampled token of request seq_no: SAMPLED_TOKEN_BASE + seq_no
TAIL_TOKEN_BASE = 1 << 29  # a prompt's tokens after its last full block


def _tiny_llama_dir(max_model_len: int) -> str:
    d = Path(tempfile.gettempdir()) / f"pagesim-parity-llama-{max_model_len}"
    d.mkdir(exist_ok=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 1, "vocab_size": 1 << 31, "max_position_embeddings": max_model_len,
        "torch_dtype": "float32",
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


class VllmOracle:
    """vLLM's scheduler for one pagesim `Config` (paged, recompute preemption, n = 1; `config.policy`: fcfs or
    priority, with each request's `priority`)."""

    def __init__(self, config: Config):
        bs = config.block_size
        self.max_model_len = config.resolved_max_model_len
        self.num_blocks = config.resolved_num_gpu_blocks
        model_config = ModelConfig(
            model=_tiny_llama_dir(self.max_model_len), max_model_len=self.max_model_len,
            skip_tokenizer_init=True, dtype="float32", seed=0,
        )
        scheduler_config = SchedulerConfig(
            max_num_seqs=config.max_num_seqs, max_num_batched_tokens=config.max_num_batched_tokens,
            max_model_len=self.max_model_len, enable_chunked_prefill=config.enable_chunked_prefill,
            is_encoder_decoder=False, policy=config.policy, watermark=config.watermark,
        )
        cache_config = CacheConfig(block_size=bs, enable_prefix_caching=config.enable_prefix_caching)
        cache_config.num_gpu_blocks = self.num_blocks
        vllm_config = VllmConfig(
            model_config=model_config, scheduler_config=scheduler_config, cache_config=cache_config,
            device_config=DeviceConfig("cpu"),
        )
        import torch  # the spec's dtype field; vLLM has imported torch already (pagesim's core never does)

        kv_cache_config = KVCacheConfig(
            num_blocks=self.num_blocks, kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer.0"], FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32))],
        )
        self.scheduler = Scheduler(
            vllm_config=vllm_config, kv_cache_config=kv_cache_config,
            structured_output_manager=StructuredOutputManager(vllm_config), block_size=bs, log_stats=True,
        )
        init_none_hash(sha256)
        self.block_hasher = get_request_block_hasher(bs, sha256) if config.enable_prefix_caching else None
        self.block_size = bs
        self._key_ids: dict = {}
        self._seq_no: dict[str, int] = {}
        self.rejected: list[tuple[str, str]] = []  # (request id, reason) in arrival order, this step

    def prompt_token_ids(self, req: Request) -> list[int]:
        bs = self.block_size
        num_full = req.prompt_len // bs
        ids = []
        for i in range(num_full):
            key_id = self._key_ids.setdefault(req.block_content_key(i, bs), len(self._key_ids) + 1)
            ids.extend([key_id] * bs)
        ids.extend([TAIL_TOKEN_BASE + req.seq_no] * (req.prompt_len - num_full * bs))
        return ids

    def add_request(self, req: Request) -> bool:
        """Queue the request, or reject it as vLLM's input processor does (before the scheduler sees it)."""
        if req.prompt_len >= self.max_model_len:
            self.rejected.append((req.request_id, "prompt_len >= max_model_len"))
            return False
        params = SamplingParams(max_tokens=req.output_len, ignore_eos=True)
        vreq = VllmRequest(
            request_id=req.request_id, prompt_token_ids=self.prompt_token_ids(req), sampling_params=params,
            pooling_params=None, arrival_time=req.arrival_time, priority=req.priority,
            block_hasher=self.block_hasher,
        )
        self._seq_no[req.request_id] = req.seq_no
        self.scheduler.add_request(vreq)
        return True

    def has_work(self) -> bool:
        return self.scheduler.has_requests()

    def num_free_blocks(self) -> int:
        return self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks()

    def step(self, step: int) -> StepRecord:
        sched = self.scheduler
        out = sched.schedule()
        rec = StepRecord(step=step, scheduled=dict(out.num_scheduled_tokens))
        rec.preempted = sorted(out.preempted_req_ids or ())
        for new in out.scheduled_new_reqs:
            rec.admitted[new.req_id] = new.num_computed_tokens
        cached = out.scheduled_cached_reqs
        for rid, nct in zip(cached.req_ids, cached.num_computed_tokens):
            if rid in cached.resumed_req_ids:
                rec.admitted[rid] = nct
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            r = sched.requests[rid]
            sampled.append([SAMPLED_TOKEN_BASE + self._seq_no[rid]] if r.num_computed_tokens >= r.num_tokens else [])
        runner_out = ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={rid: i for i, rid in enumerate(req_ids)}, sampled_token_ids=sampled,
        )
        engine_outputs = sched.update_from_output(out, runner_out)
        for eco in engine_outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    rec.finished.append(o.request_id)
        rec.finished.sort()
        rec.rejected = [rid for rid, _ in self.rejected]
        self.rejected = []
        rec.num_free_blocks = self.num_free_blocks()
        return rec
