"""Peak memory of one FSDP2 training step per rank, from the config alone (torch-free arithmetic).

The kernel path modelled is fsdpbench's PyTorch one, the path CPU runs: the chunked Gated DeltaNet
in fp32 (``model/deltanet.py``), SDPA attention (flash on CPU: output + logsumexp saved), grouped
experts (``grouped_mm``; the ``loop`` path saves the same tensors) and the chunked linear
cross-entropy. The saved tensors of each layer type were read off the code and are checked against
autograd's own saved tensors (``tests/test_memory_estimate.py``). NPU and CUDA kernels (fla's
DeltaNet, fused attention, ``npu_grouped_matmul``) save different tensors: the estimate says which
path it models (``kernel_path``), and only the CPU path has been measured (docs/memory.md).

Peak candidates (the largest is the estimate):

- ``loss``: end of forward, inside the loss. Sharded parameters and optimizer states, the
  never-resharded root (embed, norm, lm_head) unsharded, every layer's saved activations (only the
  layer inputs with ``ac=full``), the loss's saved and transient buffers.
- ``backward``: the backward of the layer with the most activations (with ``ac=full``: after its recompute). The root unsharded,
  ``1 + prefetch`` layers unsharded, their unsharded gradients in ``param_dtype`` and the
  reduce-scatter's copies in ``reduce_dtype`` (FSDP2 casts the gradients before the reduce-scatter
  when the dtypes differ), the activations still saved and the layer's backward working set.
- ``optimizer``: after backward: sharded parameters, gradients and optimizer states, plus the
  foreach optimizer's temporaries (one sharded copy).
"""

from __future__ import annotations

from typing import Any

from fsdpbench.config import ModelConfig
from fsdpbench.model.flops import DTYPE_BYTES, params_per_layer, total_params

KERNEL_PATHS = {
    "pytorch": "fsdpbench's PyTorch kernels (the CPU path): chunked Gated DeltaNet in fp32, SDPA "
    "attention, grouped experts (grouped_mm or loop), chunked linear cross-entropy",
}
"""The kernel paths the estimate models; only ``pytorch`` so far (measured on CPU)."""

DEVICE_MEMORY_GIB: dict[str, float] = {
    "910b": 64,
    "910b1": 64,
    "910b2": 64,
    "910b3": 64,
    "910b4": 32,
    "a100": 80,
    "h100": 80,
    "h800": 80,
    "h20": 96,
    "h200": 141,
    "b200": 180,
}
"""Nominal device memory (GiB) per device name; the usable part is a little less (the runtime and
the communication library reserve some)."""

BACKWARD_WORKING_SET = 0.05
"""One layer's backward temporaries as a fraction of its saved activations (the gradients of its
largest saved tensors, freed as they are consumed; measured 0.04–0.2 on CPU for the DeltaNet layer)."""

OPTIMIZER_STATES = {"adamw": 2, "sgd": 0}


def _per_token_bytes(cfg: ModelConfig, layer_type: str, act: int) -> float:
    """Saved bytes per token of one layer (its two norms, mixer and MoE), ``act`` bytes per activation
    element; the DeltaNet's chunked core and the norms' saved tensors are fp32 whatever ``act``."""
    f, H = 4, cfg.hidden_size
    norms = 2 * (f * H + f)  # input and post-attention RMSNorm: x̂ (fp32) and 1/rms
    if layer_type == "linear_attention":
        Hk, Hv, Dk, Dv, C = (
            cfg.linear_num_key_heads,
            cfg.linear_num_value_heads,
            cfg.linear_key_head_dim,
            cfg.linear_value_head_dim,
            cfg.gdn_chunk_size,
        )
        conv = 2 * Hk * Dk + Hv * Dv
        mixer = act * (2 * conv + H + Hv * Dv + 2 * Hv * Dv)  # conv in/out, x, out_proj input, o and z
        mixer += f * (
            4 * Hv * Dv  # v (heads), its chunked copy, the gated norm's fp32 terms
            + 2 * Hk * Dk  # q, k before the L2 norm
            + 3 * Hv * Dk  # q, k, βk in chunks
            + 5 * Hv * C  # decay, attention and the triangular inverse per chunk ([C, C] per token)
            + 2 * Hv * (Dv + Dk)  # [βv | βk e^g] and uw = T⁻¹ [...]
            + 2 * Hv * Dk  # kᵀ decayed to the chunk end, w
            + Hv * Dk * (Dk + Dv) / C  # per-chunk transition and state
            + 7 * Hv
            + 2 * Hk  # gates, β, decays, L2 norms
        )
    else:
        N, K, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        mixer = act * (H + N * D + 3 * N * D + 2 * K * D) + f * (N * D + K * D + 2 * N + K)
    E, k, Im, Is = (
        cfg.num_experts,
        cfg.num_experts_per_tok,
        cfg.moe_intermediate_size,
        cfg.shared_expert_intermediate_size,
    )
    moe = act * (3 * k * H + 4 * k * Im + 2 * H + 4 * Is) + f * (E + 2 * k + 2) + 8 * 3 * k
    return norms + mixer + moe


def activation_bytes(cfg: ModelConfig, layer_type: str, tokens: int, act_dtype: str = "float32") -> float:
    """Bytes one layer of ``layer_type`` saves for backward over ``tokens`` tokens (no checkpointing)."""
    return tokens * _per_token_bytes(cfg, layer_type, DTYPE_BYTES[act_dtype])


def loss_bytes(cfg: ModelConfig, tokens: int, act_dtype: str, param_dtype: str) -> dict[str, float]:
    """The final norm's and the loss's saved bytes and the loss's transient peak over ``tokens``."""
    a, V, H, f = DTYPE_BYTES[act_dtype], cfg.vocab_size, cfg.hidden_size, 4
    norm = tokens * (f * H + f)
    chunk = cfg.loss_chunk_size
    if tokens <= chunk:  # plain autograd: fp32 logits saved, softmax gradient and its input gradient
        return {"saved": norm + tokens * (a * H + f * V), "transient": 2 * f * tokens * V}
    # _LinearCrossEntropy: dL/dh and dL/dw saved (dw accumulated in fp32); in the chunk loop the
    # previous chunk's fp32 dlogits, this chunk's fp32 logits, logits − lse and its exp
    dw32 = f * V * H if DTYPE_BYTES[param_dtype] != f else 0
    return {
        "saved": norm + tokens * a * H + V * H * DTYPE_BYTES[param_dtype],
        "transient": 4 * f * chunk * V + dw32,
    }


def estimate_peak(
    cfg: ModelConfig,
    seq_len: int,
    mesh: tuple[int, ...],
    *,
    batch_size: int = 1,
    param_dtype: str = "float32",
    reduce_dtype: str = "float32",
    master_dtype: str = "float32",
    optimizer: str = "adamw",
    ac: str = "off",
    prefetch: int = 0,
    kernel_path: str = "pytorch",
    device: str | None = None,
) -> dict[str, Any]:
    """Peak bytes per rank of one FSDP2 training step (the module docstring says what is counted).

    Returns the components of the largest candidate, ``total``, ``peak_at`` (which candidate),
    every candidate's total, the kernel path, and with ``device`` its memory and whether it fits.
    """
    if kernel_path not in KERNEL_PATHS:
        raise ValueError(f"kernel path {kernel_path!r} is not modelled; choose {', '.join(KERNEL_PATHS)}")
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"optimizer {optimizer!r}: choose {', '.join(OPTIMIZER_STATES)}")
    if ac not in ("off", "full"):
        raise ValueError(f"ac {ac!r}: choose off or full")
    cfg.validate_seq_len(seq_len)
    shard_size = mesh[-1]
    tokens = batch_size * seq_len
    pb, mb, rb = DTYPE_BYTES[param_dtype], DTYPE_BYTES[master_dtype], DTYPE_BYTES[reduce_dtype]
    per = params_per_layer(cfg)
    shard = -(-total_params(cfg) // shard_size)
    root = per["embed_tokens"] + per["lm_head"] + per["norm"]
    biggest_layer = max(per[t] for t in set(cfg.layer_types))

    sharded = {
        "params_sharded": shard * mb,
        "optimizer_states": OPTIMIZER_STATES[optimizer] * shard * mb,
    }
    root_unsharded = root * pb if shard_size > 1 or pb != mb else 0
    acts = [activation_bytes(cfg, t, tokens, param_dtype) for t in cfg.layer_types]
    layer_inputs = len(acts) * tokens * cfg.hidden_size * DTYPE_BYTES[param_dtype]
    saved = layer_inputs if ac == "full" else sum(acts)
    loss = loss_bytes(cfg, tokens, param_dtype, param_dtype)
    rope = 2 * seq_len * int(cfg.head_dim * cfg.partial_rotary_factor) * DTYPE_BYTES[param_dtype]

    candidates: dict[str, dict[str, float]] = {}
    candidates["loss"] = {
        **sharded,
        "root_unsharded": root_unsharded,
        "activations": saved + rope,
        "loss_saved": loss["saved"],
        "loss_transient": loss["transient"],
    }
    # backward of the layer with the most activations (recomputed with ac=full), the others still saved
    last = max(acts)
    unsharded_layers = (1 + prefetch) * biggest_layer
    rs_copy = (biggest_layer + root) * rb if rb != pb else 0
    candidates["backward"] = {
        **sharded,
        "grads_sharded": -(-root // shard_size) * mb,
        "root_unsharded": root_unsharded,
        "layers_unsharded": unsharded_layers * pb,
        "grads_unsharded": (biggest_layer + root) * pb,
        "reduce_scatter_copies": rs_copy,
        "activations": (layer_inputs + last if ac == "full" else sum(acts)) + rope,
        "backward_working_set": BACKWARD_WORKING_SET * last,
    }
    candidates["optimizer"] = {
        **sharded,
        "grads_sharded": shard * mb,
        "optimizer_temporaries": shard * mb if OPTIMIZER_STATES[optimizer] else 0,
    }
    totals = {name: sum(parts.values()) for name, parts in candidates.items()}
    peak_at = max(totals, key=totals.__getitem__)
    out: dict[str, Any] = {
        "total": totals[peak_at],
        "peak_at": peak_at,
        "components": candidates[peak_at],
        "candidates": totals,
        "kernel_path": kernel_path,
        "kernel_path_description": KERNEL_PATHS[kernel_path],
        "settings": {
            "seq_len": seq_len,
            "batch_size": batch_size,
            "shard_size": shard_size,
            "param_dtype": param_dtype,
            "reduce_dtype": reduce_dtype,
            "master_dtype": master_dtype,
            "optimizer": optimizer,
            "ac": ac,
            "prefetch": prefetch,
        },
    }
    if device is not None:
        out.update(device_fit(out["total"], device))
    return out


def device_fit(total: float, device: str) -> dict[str, Any]:
    """``device``'s nominal memory and whether ``total`` bytes fit in it."""
    key = device.lower().replace("ascend", "").replace("nvidia", "").replace(" ", "").replace("-", "")
    gib = DEVICE_MEMORY_GIB.get(key)
    if gib is None:
        raise ValueError(
            f"device {device!r} is not in the memory table; choose one of {', '.join(DEVICE_MEMORY_GIB)}"
        )
    capacity = gib * 2**30
    return {"device": device, "device_memory_bytes": capacity, "fits": total <= capacity}
