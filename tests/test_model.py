"""The Llama-style model: paged, stepwise forward == plain full-sequence causal forward."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from engine.kernels import rope_cache
from engine.model import AttentionMetadata, LlamaModel, reference_forward
from engine.weights import load_safetensors, save_safetensors
from pagesim.specs import RopeScaling, get_model

BLOCK_SIZE = 8
NUM_BLOCKS = 24
DEV = "cuda" if torch.cuda.is_available() else "cpu"
ATOL_FP32 = 5e-3 if DEV == "cuda" else 1e-4  # hidden states are O(1); tf32 attention dots on a GPU


class PagedRun:
    """A tiny hand-rolled scheduler: sequences own shuffled physical blocks; steps are built from
    (seq, first_position, num_tokens) prefill chunks plus decode tokens, packed prefill-first."""

    def __init__(self, model: LlamaModel, tokens: dict[str, torch.Tensor], seed: int = 0):
        self.model, self.tokens = model, tokens
        self.kv_cache = torch.randn(model.allocate_kv_cache(NUM_BLOCKS, BLOCK_SIZE).shape,
                                    generator=torch.Generator().manual_seed(seed)).to(model.device, model.dtype)
        self.free = torch.randperm(NUM_BLOCKS, generator=torch.Generator().manual_seed(seed + 1)).tolist()
        self.tables: dict[str, list[int]] = {}
        self.hidden: dict[str, dict[int, torch.Tensor]] = {name: {} for name in tokens}

    def blocks_for(self, name: str, length: int) -> list[int]:
        table = self.tables.setdefault(name, [])
        while len(table) * BLOCK_SIZE < length:
            table.append(self.free.pop())
        return table

    def table_tensor(self, names: list[str | None], width: int = 5) -> torch.Tensor:
        """Block tables padded with an out-of-range id (a padding row has no blocks at all)."""
        rows = [self.tables.get(n, []) + [1 << 30] * (width - len(self.tables.get(n, []))) for n in names]
        return torch.tensor(rows, dtype=torch.int32).reshape(len(names), width).to(self.model.device)

    def step(self, prefill: list[tuple[str, int, int]], decode: list[str | None]) -> None:
        """prefill: (seq, start, count) chunks; decode: seq names (None = a padding row)."""
        ids, pos, slots, owners = [], [], [], []
        cu, ctx_p = [0], []
        for name, start, count in prefill:
            table = self.blocks_for(name, start + count)
            for p in range(start, start + count):
                ids.append(int(self.tokens[name][p])), pos.append(p), owners.append((name, p))
                slots.append(table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE)
            cu.append(cu[-1] + count)
            ctx_p.append(start + count)
        ctx_d = []
        for name in decode:
            if name is None:
                ids.append(0), pos.append(0), slots.append(-1), owners.append(None), ctx_d.append(0)
                continue
            p = len(self.hidden[name])  # the next position of this sequence
            table = self.blocks_for(name, p + 1)
            ids.append(int(self.tokens[name][p])), pos.append(p), owners.append((name, p)), ctx_d.append(p + 1)
            slots.append(table[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE)
        i32 = dict(dtype=torch.int32, device=self.model.device)
        attn = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=self.model.device), num_prefill_tokens=cu[-1],
            num_decode_tokens=len(decode), cu_seqlens_q=torch.tensor(cu, **i32),
            context_lens_prefill=torch.tensor(ctx_p, **i32),
            block_tables_prefill=self.table_tensor([n for n, _, _ in prefill]),
            max_seqlen_q=max((c for _, _, c in prefill), default=0),
            context_lens_decode=torch.tensor(ctx_d, **i32),
            block_tables_decode=self.table_tensor(decode))
        dev = self.model.device
        hidden = self.model.forward(torch.tensor(ids, device=dev), torch.tensor(pos, device=dev), self.kv_cache, attn)
        for row, owner in enumerate(owners):
            if owner is not None:
                self.hidden[owner[0]][owner[1]] = hidden[row]


def paged_vs_full_errors(model: LlamaModel, reference=reference_forward) -> dict[str, float]:
    """Chunked prefill, two sequences in one step, a prefix-cache hit that reads another sequence's
    block, mixed prefill + decode steps with padding rows, all on shuffled physical blocks; returns
    each sequence's max |paged hidden - full causal forward hidden|."""
    g = torch.Generator().manual_seed(2)
    vocab = model.spec.vocab_size
    a = torch.randint(0, vocab, (17,), generator=g)
    c = torch.cat([a[:8], torch.randint(0, vocab, (7,), generator=g)])  # shares a's first block
    tokens = {"a": a, "b": torch.randint(0, vocab, (9,), generator=g), "c": c}
    run = PagedRun(model, tokens)
    run.step([("a", 0, 5)], [])  # first chunk of a
    run.step([("a", 5, 9), ("b", 0, 7)], [])  # a's second chunk reads its first from the cache
    run.tables["c"] = run.tables["a"][:1]  # prefix-cache hit: c reuses a's first full block ...
    run.hidden["c"] = {p: run.hidden["a"][p] for p in range(8)}
    run.step([("c", 8, 5)], ["a", "b"])  # ... and prefills only its own tokens, beside two decodes
    run.step([], ["a", None, "b", "c"])
    run.step([], ["a", "c", None])
    errors = {}
    for name, toks in tokens.items():
        done = sorted(run.hidden[name])
        assert done == list(range(len(done))), f"{name}: positions computed out of order"
        ref = reference(model, toks[: len(done)].to(model.device))
        got = torch.stack([run.hidden[name][p] for p in done])
        assert got.isfinite().all(), f"sequence {name}: non-finite hidden states"
        errors[name] = (got.float() - ref.float()).abs().max().item()
    return errors


def test_paged_steps_match_full_sequence_forward():
    model = LlamaModel.random(get_model("toy"), device=DEV, dtype=torch.float32, seed=1)
    for name, err in paged_vs_full_errors(model).items():
        assert err < ATOL_FP32, f"sequence {name}: paged forward differs from the full causal forward by {err:.3g}"


def test_random_weights_are_deterministic_and_finite():
    spec = get_model("toy")
    m1, m2 = LlamaModel.random(spec, seed=3), LlamaModel.random(spec, seed=3)
    assert torch.equal(m1.layers[1].qkv, m2.layers[1].qkv) and torch.equal(m1.lm_head, m2.lm_head)
    assert not torch.equal(m1.layers[0].qkv, LlamaModel.random(spec, seed=4).layers[0].qkv)
    logits = m1.compute_logits(reference_forward(m1, torch.arange(12)))
    assert logits.shape == (12, spec.vocab_size) and logits.dtype == torch.float32 and logits.isfinite().all()


def hf_state_dict(model: LlamaModel) -> dict[str, torch.Tensor]:
    s, d = model.spec, model.spec.head_dim
    out = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.norm, "lm_head.weight": model.lm_head}
    for i, w in enumerate(model.layers):
        p = f"model.layers.{i}."
        q, k, v = w.qkv.split([s.num_heads * d, s.num_kv_heads * d, s.num_kv_heads * d])
        gate, up = w.gate_up.chunk(2)
        out |= {p + "input_layernorm.weight": w.input_norm, p + "post_attention_layernorm.weight": w.post_norm,
                p + "self_attn.q_proj.weight": q, p + "self_attn.k_proj.weight": k, p + "self_attn.v_proj.weight": v,
                p + "self_attn.o_proj.weight": w.o_proj, p + "mlp.gate_proj.weight": gate,
                p + "mlp.up_proj.weight": up, p + "mlp.down_proj.weight": w.down}
    return out


def test_safetensors_round_trip_loads_hf_llama_names(tmp_path):
    spec = get_model("toy")
    model = LlamaModel.random(spec, dtype=torch.bfloat16, seed=5)
    save_safetensors(hf_state_dict(model), tmp_path / "model.safetensors")
    loaded = LlamaModel.from_safetensors(spec, tmp_path, dtype=torch.bfloat16)
    ids = torch.arange(10)
    assert torch.equal(reference_forward(loaded, ids), reference_forward(model, ids)), "loaded model differs"


def test_reads_files_written_by_the_safetensors_package(tmp_path):
    st = __import__("pytest").importorskip("safetensors.torch")
    tensors = {"a": torch.randn(3, 5).to(torch.bfloat16), "b": torch.arange(7, dtype=torch.int64)}
    st.save_file(tensors, str(tmp_path / "x.safetensors"))
    loaded = load_safetensors(tmp_path / "x.safetensors")
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
    save_safetensors(tensors, tmp_path / "y.safetensors")
    theirs = st.load_file(str(tmp_path / "y.safetensors"))
    assert all(torch.equal(theirs[k], v) for k, v in tensors.items())


# ---- an independent reference: nothing shared with the engine but the checkpoint ---------------------------
TOY_SCALED = dataclasses.replace(get_model("toy"), name="toy-scaled",
                                 rope_scaling=RopeScaling(8.0, 1.0, 4.0, 32))  # all three Llama-3.1 bands at D=16


def closed_form_frequencies(spec) -> list[float]:
    """theta^(-2i/D), then Meta's apply_scaling (llama3 rope_type) written out with plain floats."""
    d = spec.head_dim
    freqs = [spec.rope_theta ** (-2 * i / d) for i in range(d // 2)]
    r = spec.rope_scaling
    if r is None:
        return freqs
    low_wavelen = r.original_max_position_embeddings / r.low_freq_factor
    high_wavelen = r.original_max_position_embeddings / r.high_freq_factor
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / r.factor)
        else:
            smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) / (
                r.high_freq_factor - r.low_freq_factor)
            out.append((1 - smooth) * f / r.factor + smooth * f)
    return out


def checkpoint(spec, seed: int) -> dict[str, torch.Tensor]:
    """A random checkpoint in HF Llama's layout, with q/k large enough that the attention scale matters."""
    g = torch.Generator().manual_seed(seed)
    h, d, i = spec.hidden_size, spec.head_dim, spec.intermediate_size

    def w(*shape, std):
        return torch.randn(*shape, generator=g) * std

    sd = {"model.embed_tokens.weight": w(spec.vocab_size, h, std=1.0), "model.norm.weight": 1 + w(h, std=0.1),
          "lm_head.weight": w(spec.vocab_size, h, std=0.1)}
    for layer in range(spec.num_layers):
        p = f"model.layers.{layer}."
        sd |= {p + "input_layernorm.weight": 1 + w(h, std=0.1), p + "post_attention_layernorm.weight": 1 + w(h, std=0.1),
               p + "self_attn.q_proj.weight": w(spec.num_heads * d, h, std=0.3),
               p + "self_attn.k_proj.weight": w(spec.num_kv_heads * d, h, std=0.3),
               p + "self_attn.v_proj.weight": w(spec.num_kv_heads * d, h, std=0.2),
               p + "self_attn.o_proj.weight": w(h, spec.num_heads * d, std=0.1),
               p + "mlp.gate_proj.weight": w(i, h, std=0.1), p + "mlp.up_proj.weight": w(i, h, std=0.1),
               p + "mlp.down_proj.weight": w(h, i, std=0.1)}
    return sd


def independent_forward(spec, sd: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """Full-sequence causal forward from the checkpoint's own matrices: RoPE as a complex rotation of
    (x_i, x_{i+D/2}) pairs by closed-form angles, SDPA with its default 1/sqrt(D) scale, K/V heads repeated."""
    t, d, eps = ids.shape[0], spec.head_dim, spec.rms_norm_eps
    freqs = torch.tensor(closed_form_frequencies(spec), dtype=torch.float64)
    rot = torch.polar(torch.ones(t, d // 2, dtype=torch.float64), torch.arange(t, dtype=torch.float64)[:, None] * freqs)

    def rope(x):  # [T, H, D]
        z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double()) * rot[:, None, :]
        return torch.cat([z.real, z.imag], dim=-1).float()

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    h = sd["model.embed_tokens.weight"][ids].float()
    group = spec.num_heads // spec.num_kv_heads
    for layer in range(spec.num_layers):
        p = f"model.layers.{layer}."
        x = norm(h, sd[p + "input_layernorm.weight"])
        q = rope((x @ sd[p + "self_attn.q_proj.weight"].T).view(t, spec.num_heads, d))
        k = rope((x @ sd[p + "self_attn.k_proj.weight"].T).view(t, spec.num_kv_heads, d))
        v = (x @ sd[p + "self_attn.v_proj.weight"].T).view(t, spec.num_kv_heads, d)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
        h = h + o.transpose(0, 1).reshape(t, -1) @ sd[p + "self_attn.o_proj.weight"].T
        x = norm(h, sd[p + "post_attention_layernorm.weight"])
        h = h + (F.silu(x @ sd[p + "mlp.gate_proj.weight"].T) * (x @ sd[p + "mlp.up_proj.weight"].T)) @ \
            sd[p + "mlp.down_proj.weight"].T
    return norm(h, sd["model.norm.weight"])


@pytest.mark.parametrize("spec", [get_model("toy"), TOY_SCALED], ids=["toy", "toy-llama3-rope-scaling"])
def test_paged_steps_match_an_independent_reference(spec):
    sd = checkpoint(spec, seed=7)
    model = LlamaModel.from_hf_state_dict(spec, sd, device=DEV, dtype=torch.float32)
    reference = lambda m, ids: independent_forward(spec, sd, ids.cpu()).to(m.device)  # noqa: E731
    errors = paged_vs_full_errors(model, reference)
    for name, err in errors.items():
        assert err < 20 * ATOL_FP32, f"sequence {name}: engine differs from the independent reference by {err:.3g}"
    # The check has teeth: a 1/D attention scale (instead of 1/sqrt(D)) is caught.
    model.scale = 1 / spec.head_dim
    worst = max(paged_vs_full_errors(model, reference).values())
    assert worst > 100 * ATOL_FP32, f"a wrong attention scale changed the hidden states by only {worst:.3g}"


@pytest.mark.parametrize("name", ["toy", "toy-scaled", "llama-3-8b", "llama-3.1-8b"])
def test_rope_cache_matches_the_closed_form(name):
    spec = TOY_SCALED if name == "toy-scaled" else get_model(name)
    positions = [0, 1, 7, 4095, 8191, 100_000]
    positions = [p for p in positions if p < spec.max_position_embeddings]
    table = rope_cache(spec.head_dim, max(positions) + 1, spec.rope_theta, torch.device("cpu"), spec.rope_scaling)
    half = spec.head_dim // 2
    for p in positions:
        want = [p * f for f in closed_form_frequencies(spec)]
        cos = torch.tensor([math.cos(a) for a in want], dtype=torch.float32)
        sin = torch.tensor([math.sin(a) for a in want], dtype=torch.float32)
        assert torch.allclose(table[p, :half], cos, atol=2e-6) and torch.allclose(table[p, half:], sin, atol=2e-6), \
            f"{name}: rope_cache row {p} is not cos/sin of position x frequency"


def test_llama_3_1_scaling_changes_only_the_low_frequencies():
    base, scaled = get_model("llama-3-8b"), get_model("llama-3.1-8b")
    f0, f1 = closed_form_frequencies(base), closed_form_frequencies(scaled)
    assert f1[0] == f0[0] and math.isclose(f1[-1], f0[-1] / 8), "high frequencies kept, the lowest divided by 8"
    assert scaled.max_position_embeddings == 131072 and scaled.kv_bytes_per_token == base.kv_bytes_per_token


def test_a_truncated_or_lying_safetensors_file_is_refused(tmp_path):
    """Header offsets beyond the file (a truncated download) are an error naming the file, not garbage weights."""
    import pytest

    save_safetensors({"a": torch.randn(64, 64)}, tmp_path / "x.safetensors")
    data = (tmp_path / "x.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.safetensors"):
        load_safetensors(tmp_path / "cut.safetensors")


def test_fp8_tensors_round_trip(tmp_path):
    t = torch.randn(4, 8).to(torch.float8_e4m3fn)
    save_safetensors({"w": t}, tmp_path / "f.safetensors")
    assert torch.equal(load_safetensors(tmp_path / "f.safetensors")["w"].view(torch.uint8), t.view(torch.uint8))
