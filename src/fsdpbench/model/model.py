"""Qwen3.5-35B-A3B-shaped MoE causal LM (text tower), in one readable pass.

Reference: transformers' ``Qwen3_5MoeForCausalLM`` (``models/qwen3_5_moe``); parameter names and shapes
are identical, so its state dict loads with ``strict=True``. Simplified only in what it leaves out:
KV/recurrent caches and generation, padding masks and packed sequences, the router aux loss, the
vision tower and the multi-token-prediction head. The model has no buffers (RoPE is computed on the
fly), so a runner can build it on ``meta``, shard it, ``to_empty()`` it and load parameters.

Structure (pre-norm residual, ``i`` = layer index)::

    h = embed_tokens(ids)
    for i: h = h + mixer_i(input_layernorm(h));  h = h + mlp(post_attention_layernorm(h))
        mixer_i = self_attn (gated softmax attention) if i % interval == interval − 1 else linear_attn (Gated DeltaNet)
        mlp     = sparse MoE (top-k routed experts + sigmoid-gated shared expert), every layer
    loss = chunked_cross_entropy(lm_head(norm(h)), labels)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fsdpbench.config import ModelConfig
from fsdpbench.model.deltanet import GatedDeltaNet
from fsdpbench.model.layers import GatedAttention, RMSNorm, rope_cos_sin
from fsdpbench.model.moe import SparseMoeBlock

IGNORE_INDEX = -100


@dataclass
class CausalLMOutput:
    """``loss`` (mean over labelled tokens) when labels were given, else ``logits [B, T, V]``."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None


class DecoderLayer(nn.Module):
    """One pre-norm block: token mixer (attention or Gated DeltaNet), then the sparse MoE."""

    def __init__(self, cfg: ModelConfig, layer_type: str) -> None:
        super().__init__()
        self.layer_type = layer_type
        if layer_type == "full_attention":
            self.self_attn = GatedAttention(cfg)
        else:
            self.linear_attn = GatedDeltaNet(cfg)
        self.mlp = SparseMoeBlock(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, h_BTH: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        if self.layer_type == "full_attention":
            h_BTH = h_BTH + self.self_attn(self.input_layernorm(h_BTH), rope)
        else:
            h_BTH = h_BTH + self.linear_attn(self.input_layernorm(h_BTH))
        return h_BTH + self.mlp(self.post_attention_layernorm(h_BTH))


class TextModel(nn.Module):
    """Embedding, decoder layers and final norm (transformers' ``model.*`` names)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, t) for t in cfg.layer_types)
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, input_ids_BT: torch.Tensor) -> torch.Tensor:
        h_BTH = self.embed_tokens(input_ids_BT)
        cfg = self.cfg
        rope = rope_cos_sin(
            input_ids_BT.shape[1],
            int(cfg.head_dim * cfg.partial_rotary_factor),
            cfg.rope_theta,
            device=h_BTH.device,
            dtype=h_BTH.dtype,
        )
        for layer in self.layers:
            h_BTH = layer(h_BTH, rope)
        return self.norm(h_BTH)


class _LinearCrossEntropy(torch.autograd.Function):
    """Sum of token cross-entropies of ``h @ wᵀ`` without ever holding all logits.

    Forward walks the tokens in chunks: logits of one chunk (in fp32), their loss, and — when a
    gradient will be needed — that chunk's ``dL/dh`` and its share of ``dL/dw``, so nothing of size
    tokens × vocab is saved. lm_head is the last op of the forward and the first of the backward,
    so computing its gradient here moves no work across communication; backward only scales.
    """

    @staticmethod
    def forward(ctx, h_NH, w_VH, labels_N, chunk, with_grad):
        loss = h_NH.new_zeros((), dtype=torch.float32)
        dh_NH = torch.zeros_like(h_NH) if with_grad else None
        dw_VH = torch.zeros_like(w_VH, dtype=torch.float32) if with_grad else None
        for start in range(0, h_NH.shape[0], chunk):
            h_cH, y_c = h_NH[start : start + chunk], labels_N[start : start + chunk]
            logits_cV = (h_cH @ w_VH.t()).float()
            lse_c = torch.logsumexp(logits_cV, dim=-1)
            valid_c = y_c != IGNORE_INDEX
            y_safe_c = torch.where(valid_c, y_c, 0)
            target_c = logits_cV.gather(1, y_safe_c[:, None]).squeeze(1)
            loss = loss + torch.where(valid_c, lse_c - target_c, 0.0).sum()
            if with_grad:
                # d(sum CE)/d logits = softmax − onehot on labelled rows, 0 on ignored rows
                dlogits_cV = torch.exp(logits_cV - lse_c[:, None])
                dlogits_cV.scatter_add_(1, y_safe_c[:, None], torch.full_like(lse_c[:, None], -1.0))
                dlogits_cV.mul_(valid_c[:, None])
                dlogits_cV = dlogits_cV.to(w_VH.dtype)
                dh_NH[start : start + chunk] = dlogits_cV @ w_VH
                dw_VH += dlogits_cV.t() @ h_cH
        if with_grad:
            ctx.save_for_backward(dh_NH, dw_VH.to(w_VH.dtype))
        return loss

    @staticmethod
    def backward(ctx, dloss):
        dh_NH, dw_VH = ctx.saved_tensors
        return dh_NH * dloss.to(dh_NH.dtype), dw_VH * dloss.to(dw_VH.dtype), None, None, None


class LMHead(nn.Linear):
    """The output projection; given labels it returns the chunked cross-entropy instead of logits.

    Kept as one module call so that an FSDP unit holding ``lm_head`` gathers its weight once.
    """

    def forward(self, h_BTH: torch.Tensor, labels_BT: torch.Tensor | None = None, chunk: int = 2048):
        if labels_BT is None:
            return super().forward(h_BTH)
        # transformers' convention: labels align with input_ids; token t predicts label t + 1
        shifted_BT = F.pad(labels_BT, (0, 1), value=IGNORE_INDEX)[:, 1:]
        h_NH, labels_N = h_BTH.reshape(-1, h_BTH.shape[-1]), shifted_BT.reshape(-1)
        if h_NH.shape[0] <= chunk:  # one chunk holds every token: plain autograd is the same and cheaper
            logits_NV = F.linear(h_NH, self.weight).float()
            total = F.cross_entropy(logits_NV, labels_N, ignore_index=IGNORE_INDEX, reduction="sum")
        else:
            with_grad = torch.is_grad_enabled() and (h_NH.requires_grad or self.weight.requires_grad)
            total = _LinearCrossEntropy.apply(h_NH, self.weight, labels_N, chunk, with_grad)
        return total / (labels_N != IGNORE_INDEX).sum().clamp(min=1)


class Qwen35MoeForCausalLM(nn.Module):
    """The causal LM: ``model`` (embed, layers, norm) + untied ``lm_head``.

    Runs in whatever device context it is built in (``build_model(cfg, device="meta")`` allocates nothing).
    Parameters hold placeholder values until ``init_weights`` (or a runner's per-parameter copy) fills them.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.model = TextModel(cfg)
        self.lm_head = LMHead(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> CausalLMOutput:
        """``input_ids [B, T]`` → logits ``[B, T, V]``; with ``labels [B, T]`` → mean loss (logits None)."""
        h_BTH = self.model(input_ids)
        if labels is None:
            return CausalLMOutput(logits=self.lm_head(h_BTH))
        return CausalLMOutput(loss=self.lm_head(h_BTH, labels, self.config.loss_chunk_size))

    def set_experts_impl(self, impl: str) -> None:
        """Force the experts back-end (``auto``, ``grouped_mm``, ``loop``, ``npu``) for every layer."""
        for module in self.modules():
            if hasattr(module, "impl") and module.__class__.__name__ == "Experts":
                module.impl = impl


def build_model(cfg: ModelConfig, device: str | torch.device = "meta") -> Qwen35MoeForCausalLM:
    """Build the model on ``device`` (default ``meta``: no memory; materialise with ``to_empty`` + init)."""
    cfg.validate()
    with torch.device(device):
        return Qwen35MoeForCausalLM(cfg)
