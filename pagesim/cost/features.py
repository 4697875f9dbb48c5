"""What a cost model sees of a step: a handful of counts, computed once per step from its StepPlan."""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.scheduler import StepPlan


@dataclass(slots=True)
class StepFeatures:
    """The work of one step.

    A prefill chunk of q query tokens after c cached tokens attends causally to
    q*c + q*(q+1)/2 (query, key) pairs and reads the K/V of c + q tokens. A
    decode sequence with c computed tokens reads the K/V of c + 1 tokens (its
    own new one included). Recompute after preemption is no special case: it is
    the prefill it causes.

    max_decode_context is the longest of those decode reads (0 without decodes):
    the engine's decode kernel walks each sequence's keys serially within a
    program, so a step lasts at least as long as its longest sequence takes,
    which the sums cannot show.
    """

    num_prefill_tokens: int = 0
    num_prefill_seqs: int = 0
    prefill_attn_pairs: int = 0  # sum of q*c + q*(q+1)/2 over prefill chunks
    prefill_context_tokens: int = 0  # sum of c + q over prefill chunks (K/V read)
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0  # sum of c + 1 over decode sequences (K/V read)
    max_decode_context: int = 0  # max of c + 1 over decode sequences (0 if none)
    num_swap_out_blocks: int = 0
    num_swap_in_blocks: int = 0
    num_copy_blocks: int = 0
    num_load_blocks: int = 0  # host tier -> GPU (kv_offloading_size)
    num_store_blocks: int = 0  # GPU -> host tier

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_seqs

    @classmethod
    def from_plan(cls, plan: StepPlan) -> "StepFeatures":
        p_tokens = p_seqs = p_pairs = p_ctx = d_seqs = d_ctx = d_max = 0
        for s in plan.scheduled:
            c, q = s.num_computed_tokens, s.num_new_tokens
            if s.is_decode:
                d_seqs += 1
                d_ctx += c + q
                if c + q > d_max:
                    d_max = c + q
            else:
                p_tokens += q
                p_seqs += 1
                p_pairs += q * c + q * (q + 1) // 2
                p_ctx += c + q
        return cls(p_tokens, p_seqs, p_pairs, p_ctx, d_seqs, d_ctx, d_max,
                   len(plan.blocks_to_swap_out), len(plan.blocks_to_swap_in), len(plan.blocks_to_copy),
                   len(plan.blocks_to_load), len(plan.blocks_to_store))
