"""Small building blocks: zero-centred RMSNorm, gated RMSNorm, partial RoPE, gated attention, SwiGLU MLP.

Tensor names carry their shape: B batch, T sequence, H hidden, N query heads, K kv heads, D head dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from fsdpbench.config import ModelConfig


class RMSNorm(nn.Module):
    """Gemma-style RMSNorm: ``x * rsqrt(mean(x²) + eps) * (1 + w)`` in fp32, ``w`` initialised to 0."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ZeroCentredRMSNorm.apply(x, self.weight, self.eps)


class _ZeroCentredRMSNorm(torch.autograd.Function):
    """``RMSNorm.forward`` as one autograd node (the composite graph is ~10 small ops each way).

    With ``x̂ = x · r``, ``r = rsqrt(mean(x²) + eps)``, ``y = x̂ (1 + w)``:
    ``dw = Σ dy · x̂`` and ``dx = r (g − x̂ · mean(g · x̂))`` where ``g = dy (1 + w)``; all in fp32.
    """

    @staticmethod
    def forward(ctx, x, weight, eps):
        x32 = x.float()
        r = torch.rsqrt((x32 * x32).mean(-1, keepdim=True).add_(eps))
        xn = x32 * r
        w1 = 1.0 + weight.float()
        ctx.save_for_backward(xn, r, w1)
        ctx.dtypes = x.dtype, weight.dtype
        return (xn * w1).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xn, r, w1 = ctx.saved_tensors
        x_dtype, w_dtype = ctx.dtypes
        dy32 = dy.float()
        dw = (dy32 * xn).reshape(-1, xn.shape[-1]).sum(0).to(w_dtype) if ctx.needs_input_grad[1] else None
        g = dy32 * w1
        dx = (g - xn * (g * xn).mean(-1, keepdim=True)).mul_(r).to(x_dtype)
        return dx, dw, None


class RMSNormGated(nn.Module):
    """``w * rmsnorm(x) * silu(z)`` (plain ``w``, initialised to 1), used on each DeltaNet value head."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).to(x.dtype)
        return (self.weight * normed * F.silu(z.float())).to(x.dtype)


def rope_cos_sin(
    seq_len: int, rotary_dim: int, theta: float, *, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``[T, rotary_dim]`` for positions 0..T-1, computed on the fly (the model has no buffers).

    For text-only input the three mRoPE sections see the same position ids, so Qwen3.5's interleaved
    mRoPE reduces to this ordinary 1-D RoPE.
    """
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, rotary_dim, 2, device=device, dtype=torch.float32) / rotary_dim)
    )
    freqs_TR = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    emb_TR = torch.cat((freqs_TR, freqs_TR), dim=-1)
    return emb_TR.cos().to(dtype), emb_TR.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_partial_rope(x_BNTD: torch.Tensor, cos_TR: torch.Tensor, sin_TR: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``R = cos.shape[-1]`` dims of each head; pass the rest through."""
    rot = cos_TR.shape[-1]
    x_rot, x_pass = x_BNTD[..., :rot], x_BNTD[..., rot:]
    return torch.cat((x_rot * cos_TR + _rotate_half(x_rot) * sin_TR, x_pass), dim=-1)


class GatedAttention(nn.Module):
    """Causal GQA softmax attention with per-head QK-norm, partial RoPE and a sigmoid output gate.

    ``q_proj`` produces, per head, ``[query(D) | gate(D)]``; ``out = o_proj(attn * sigmoid(gate))``.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.rotary_dim = int(cfg.head_dim * cfg.partial_rotary_factor)
        H = cfg.hidden_size
        self.q_proj = nn.Linear(H, self.num_heads * self.head_dim * 2, bias=False)
        self.k_proj = nn.Linear(H, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(H, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, H, bias=False)
        self.q_norm = RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=cfg.rms_norm_eps)

    def forward(self, x_BTH: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        B, T, _ = x_BTH.shape
        D = self.head_dim
        q_BTN2D = self.q_proj(x_BTH).view(B, T, self.num_heads, 2 * D)
        q_BTND, gate_BTND = q_BTN2D.chunk(2, dim=-1)
        q_BNTD = self.q_norm(q_BTND).transpose(1, 2)
        k_BKTD = self.k_norm(self.k_proj(x_BTH).view(B, T, self.num_kv_heads, D)).transpose(1, 2)
        v_BKTD = self.v_proj(x_BTH).view(B, T, self.num_kv_heads, D).transpose(1, 2)
        cos_TR, sin_TR = rope
        q_BNTD = apply_partial_rope(q_BNTD, cos_TR, sin_TR)
        k_BKTD = apply_partial_rope(k_BKTD, cos_TR, sin_TR)
        if x_BTH.device.type in ("cpu", "cuda"):
            y_BNTD = F.scaled_dot_product_attention(
                q_BNTD, k_BKTD, v_BKTD, is_causal=True, scale=1.0 / math.sqrt(D), enable_gqa=True
            )
        else:  # KV is small: repeating it keeps every fused backend (e.g. the NPU's) eligible
            rep = self.num_heads // self.num_kv_heads
            y_BNTD = F.scaled_dot_product_attention(
                q_BNTD,
                k_BKTD.repeat_interleave(rep, dim=1),
                v_BKTD.repeat_interleave(rep, dim=1),
                is_causal=True,
                scale=1.0 / math.sqrt(D),
            )
        y_BTND = y_BNTD.transpose(1, 2)
        return self.o_proj((y_BTND * torch.sigmoid(gate_BTND)).reshape(B, T, self.num_heads * D))


class MLP(nn.Module):
    """SwiGLU MLP (the shared expert): ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
