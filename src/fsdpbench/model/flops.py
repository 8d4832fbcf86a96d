"""Parameter, FLOP, memory and communication arithmetic of the workload, from the config alone (torch-free).

Every count is derived from the shapes in ``ModelConfig``; ``tests/test_model.py`` checks the
parameter counts against a model built on the meta device.
"""

from __future__ import annotations

from fsdpbench.config import ModelConfig

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _moe_params(cfg: ModelConfig) -> dict[str, int]:
    H, E, Im, S = (
        cfg.hidden_size,
        cfg.num_experts,
        cfg.moe_intermediate_size,
        cfg.shared_expert_intermediate_size,
    )
    return {
        "router": E * H,
        "experts": E * 3 * H * Im,
        "shared_expert": 3 * H * S + (H if S else 0),
    }


def _gdn_params(cfg: ModelConfig) -> int:
    H = cfg.hidden_size
    key_dim = cfg.linear_num_key_heads * cfg.linear_key_head_dim
    value_dim = cfg.linear_num_value_heads * cfg.linear_value_head_dim
    conv_dim = 2 * key_dim + value_dim
    Hv = cfg.linear_num_value_heads
    return (
        H * conv_dim  # in_proj_qkv
        + H * value_dim  # in_proj_z
        + 2 * H * Hv  # in_proj_b, in_proj_a
        + conv_dim * cfg.linear_conv_kernel_dim  # depthwise conv1d
        + 2 * Hv  # A_log, dt_bias
        + cfg.linear_value_head_dim  # gated norm
        + value_dim * H  # out_proj
    )


def _attn_params(cfg: ModelConfig) -> int:
    H, N, K, D = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    return H * 2 * N * D + 2 * H * K * D + N * D * H + 2 * D


def params_per_layer(cfg: ModelConfig) -> dict[str, int]:
    """Parameters of one decoder layer of each type, plus the non-layer pieces.

    Keys: ``linear_attention``, ``full_attention`` (whole decoder layer incl. MoE and its 2 norms),
    ``embed_tokens``, ``lm_head``, ``norm``.
    """
    moe = sum(_moe_params(cfg).values())
    norms = 2 * cfg.hidden_size
    return {
        "linear_attention": _gdn_params(cfg) + moe + norms,
        "full_attention": _attn_params(cfg) + moe + norms,
        "embed_tokens": cfg.vocab_size * cfg.hidden_size,
        "lm_head": 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size,
        "norm": cfg.hidden_size,
    }


def total_params(cfg: ModelConfig) -> int:
    """All parameters of the causal LM (34,660,610,688 for Qwen3.5-35B-A3B)."""
    per = params_per_layer(cfg)
    layers = sum(per[t] for t in cfg.layer_types)
    return layers + per["embed_tokens"] + per["lm_head"] + per["norm"]


def active_matmul_params(cfg: ModelConfig) -> dict[str, int]:
    """Weights that one token multiplies (active experts only), per layer type and for lm_head.

    Counts every matmul weight (projections, depthwise conv, router, the top-k routed experts, the
    shared expert and its gate); excludes norms, ``A_log``/``dt_bias`` and the embedding (a lookup).
    """
    H, Im = cfg.hidden_size, cfg.moe_intermediate_size
    moe = _moe_params(cfg)
    moe_active = moe["router"] + cfg.num_experts_per_tok * 3 * H * Im + moe["shared_expert"]
    Hv = cfg.linear_num_value_heads
    gdn = _gdn_params(cfg) - 2 * Hv - cfg.linear_value_head_dim
    attn = _attn_params(cfg) - 2 * cfg.head_dim
    return {
        "linear_attention": gdn + moe_active,
        "full_attention": attn + moe_active,
        "lm_head": H * cfg.vocab_size,
    }


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token (forward + backward) for a sequence of ``seq_len`` tokens.

    Derivation (a multiply-add = 2 FLOPs; backward = 2 × forward, as Megatron and PaLM count):

    - matmuls: 2 × ``active_matmul_params`` per token (projections, conv, router, top-k experts,
      shared expert, lm_head; the embedding lookup is free);
    - softmax attention core, per full-attention layer: QKᵀ and AV are 2 · 2 · N·D · T FLOPs per token
      without a mask; causal, as Megatron counts it, halves that → 2 · N · D · T;
    - Gated DeltaNet core per linear layer and value head, per token, chunk C, dims Dk/Dv:
      2·C·Dk (βk·kᵀ) + 2·C·Dk (q·kᵀ) + C·(Dk + Dv) (the unit-triangular solve for u and w)
      + 2·C·Dv (intra-chunk A·v) + 3 · 2·Dk·Dv (read state with w and q, write state).
      (The matmul-only inverse used here costs more on paper and runs faster; the count is the
      algorithm's, not the implementation's.)
    - norms, activations, softmax, rotary and routing bookkeeping are ignored (≪ 1%).
    The loss's logits are counted once (no recomputation).
    """
    cfg.validate_seq_len(seq_len)
    active = active_matmul_params(cfg)
    attn_core = 2 * cfg.num_attention_heads * cfg.head_dim * seq_len
    C, Dk, Dv = cfg.gdn_chunk_size, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    gdn_core = cfg.linear_num_value_heads * (4 * C * Dk + C * (Dk + Dv) + 2 * C * Dv + 6 * Dk * Dv)
    forward = 2 * active["lm_head"]
    for t in cfg.layer_types:
        forward += 2 * active[t] + (attn_core if t == "full_attention" else gdn_core)
    return 3.0 * forward


def fsdp_memory_per_rank(
    cfg: ModelConfig,
    shard_size: int,
    *,
    param_dtype: str = "bfloat16",
    master_dtype: str = "float32",
    reduce_dtype: str = "float32",
    prefetch: int = 0,
) -> dict[str, int]:
    """Bytes per rank of model state under FSDP2 sharding over ``shard_size`` ranks, with AdamW.

    FSDP keeps the sharded parameters in ``master_dtype`` (that is the master copy when it differs from
    ``param_dtype``), their gradients in the same dtype, and AdamW keeps two states (exp_avg,
    exp_avg_sq) of that dtype. The root unit (embedding, final norm, lm_head) is never resharded
    between forward and backward, so it is held unsharded in ``param_dtype`` beside the largest
    layer (plus ``prefetch`` more layers when prefetching); in backward their unsharded gradients,
    and, when ``reduce_dtype`` differs from ``param_dtype``, FSDP2's copies of them in
    ``reduce_dtype`` for the reduce-scatter. Activations are not included (``model.memory``).
    """
    total = total_params(cfg)
    pb, mb, rb = DTYPE_BYTES[param_dtype], DTYPE_BYTES[master_dtype], DTYPE_BYTES[reduce_dtype]
    shard = -(-total // shard_size)
    per = params_per_layer(cfg)
    biggest = max(per[t] for t in set(cfg.layer_types))
    root = per["embed_tokens"] + per["lm_head"] + per["norm"]
    out = {
        "params": shard * mb,
        "grads": shard * mb,
        "optimizer_states": 2 * shard * mb,
        "unsharded_params": (root + (1 + prefetch) * biggest) * pb,
        "unsharded_grads": (root + biggest) * pb,
        "reduce_scatter_copies": (root + biggest) * rb if rb != pb else 0,
    }
    out["total"] = sum(out.values())
    return out


def comm_bytes_per_unit(
    cfg: ModelConfig, mesh: tuple[int, ...], *, param_dtype: str = "bfloat16", reduce_dtype: str = "float32"
) -> dict[str, dict[str, float]]:
    """Per shard unit (each layer type, and the root = embed + norm + lm_head): bytes of the
    unsharded tensor each all-gather produces and each reduce-scatter consumes, the bytes each rank
    receives/sends ((S−1)/S of that, ring algorithm), and, for HSDP (R > 1), the all-reduce of the
    sharded gradients across replicas."""
    replicas, shard_size = (1, mesh[0]) if len(mesh) == 1 else mesh
    per = params_per_layer(cfg)
    units = {t: per[t] for t in dict.fromkeys(cfg.layer_types)}
    units["root"] = per["embed_tokens"] + per["lm_head"] + per["norm"]
    frac = (shard_size - 1) / shard_size
    out = {}
    for unit, n in units.items():
        ag, rs = n * DTYPE_BYTES[param_dtype], n * DTYPE_BYTES[reduce_dtype]
        out[unit] = {
            "all_gather_bytes": ag,
            "reduce_scatter_bytes": rs,
            "all_gather_bytes_per_rank": ag * frac,
            "reduce_scatter_bytes_per_rank": rs * frac,
            "all_reduce_bytes": rs / shard_size if replicas > 1 else 0,
        }
    return out
