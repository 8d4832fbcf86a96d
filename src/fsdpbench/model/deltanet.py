"""Gated DeltaNet: the chunked pure-PyTorch kernel, its per-token reference, and the layer.

Recurrence per (batch, value head), state ``S [Dk, Dv]``, token t (q, k L2-normalised, q scaled 1/√Dk):

    S_t = exp(g_t) · S_{t-1} + β_t · k_t (v_t − exp(g_t) · S_{t-1}ᵀ k_t)ᵀ,     o_t = S_tᵀ q_t

The chunked form (WY/UT transform, as in transformers' ``torch_chunk_gated_delta_rule`` and fla's
naive kernel) turns C tokens into a few matmuls plus one unit-lower-triangular solve per chunk. Here
that solve is done with matmuls only (``unit_lower_inverse``): faster than ``solve_triangular`` on
CPU and portable to NPU and ``torch.compile``. The scan over chunks is one multiply-add per chunk.
Sequences are padded internally to a multiple of the chunk, so any length ≥ 1 works.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fsdpbench.config import ModelConfig
from fsdpbench.model.layers import RMSNormGated

log = logging.getLogger(__name__)


class _L2Norm(torch.autograd.Function):
    """``x · rsqrt(Σx² + eps) · scale`` over the last dim as one autograd node:
    with ``y = x · r``, ``dx = r (dŷ − y Σ(dŷ · y))`` where ``dŷ = scale · dy``."""

    @staticmethod
    def forward(ctx, x, eps, scale):
        r = torch.rsqrt((x * x).sum(dim=-1, keepdim=True).add_(eps))
        y = x * r
        ctx.save_for_backward(y, r)
        ctx.scale = scale
        return y * scale if scale != 1.0 else y

    @staticmethod
    def backward(ctx, dy):
        y, r = ctx.saved_tensors
        if ctx.scale != 1.0:
            dy = dy * ctx.scale
        return (dy - y * (dy * y).sum(dim=-1, keepdim=True)).mul_(r), None, None


def _l2norm(x: torch.Tensor, eps: float = 1e-6, scale: float = 1.0) -> torch.Tensor:
    return _L2Norm.apply(x, eps, scale)


def _repeat_heads(x_BTHD: torch.Tensor, rep: int) -> torch.Tensor:
    """``repeat_interleave(rep, dim=2)`` as expand + reshape (its backward is a sum, not an index_add)."""
    B, T, H, D = x_BTHD.shape
    return x_BTHD.unsqueeze(3).expand(B, T, H, rep, D).reshape(B, T, H * rep, D)


def _prepare(q, k, v, g, beta, l2norm):
    """Shared preprocessing: fp32, L2-norm, query scale, GVA head repeat, ``[B, Hv, T, *]`` layout."""
    q, k = q.float(), k.float()
    scale = q.shape[-1] ** -0.5
    if l2norm:
        q, k = _l2norm(q, scale=scale), _l2norm(k)
    else:
        q = q * scale
    Hk, Hv = k.shape[2], v.shape[2]
    if Hk != Hv:  # each q/k head serves Hv/Hk consecutive value heads
        q, k = _repeat_heads(q, Hv // Hk), _repeat_heads(k, Hv // Hk)
    return tuple(x.transpose(1, 2).float().contiguous() for x in (q, k, v, g, beta))


def _unit_lower_inverse(a_CC: torch.Tensor) -> torch.Tensor:
    C = a_CC.shape[-1]
    if C <= 16:  # few ops beat few FLOPs here: (I + N)(I + N²)(I + N⁴)(I + N⁸), N = −L nilpotent
        n_CC = a_CC.tril(-1).neg_()
        inv_CC = n_CC + torch.eye(C, dtype=a_CC.dtype, device=a_CC.device)
        n_xCC, inv_xCC = n_CC.reshape(-1, C, C), inv_CC.view(-1, C, C)
        for _ in range(max(C - 1, 1).bit_length() - 1):
            n_xCC = torch.bmm(n_xCC, n_xCC)
            inv_xCC = torch.baddbmm(inv_xCC, inv_xCC, n_xCC)
        return inv_xCC.view(inv_CC.shape)
    P = 1 << max(C - 1, 0).bit_length()
    low_PP = F.pad(a_CC.tril(-1), (0, P - C, 0, P - C))
    batch = a_CC.shape[:-2]
    inv_nss = a_CC.new_ones(*batch, P, 1, 1)  # inverses of the diagonal s×s blocks, s = 1
    s = 1
    while s < P:
        nb = P // (2 * s)
        # the diagonal 2s×2s blocks of the matrix, and their lower-left s×s quadrant B
        blocks = low_PP.reshape(*batch, nb, 2 * s, nb, 2 * s).diagonal(dim1=-4, dim2=-2).movedim(-1, -3)
        a_inv, d_inv = inv_nss[..., 0::2, :, :], inv_nss[..., 1::2, :, :]
        off = -(d_inv @ blocks[..., s:, :s] @ a_inv)
        inv_nss = torch.cat(
            (torch.cat((a_inv, torch.zeros_like(a_inv)), dim=-1), torch.cat((off, d_inv), dim=-1)), dim=-2
        )
        s *= 2
    return inv_nss.squeeze(-3)[..., :C, :C]


class _UnitLowerInverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a_CC):
        inv_CC = _unit_lower_inverse(a_CC)
        ctx.save_for_backward(inv_CC)
        return inv_CC

    @staticmethod
    def backward(ctx, grad_CC):
        (inv_CC,) = ctx.saved_tensors
        # d(T⁻¹) = −T⁻¹ dT T⁻¹, and only the strictly lower part of `a` enters T
        C = inv_CC.shape[-1]
        inv_t = inv_CC.reshape(-1, C, C).transpose(-1, -2)
        prod = torch.bmm(torch.bmm(inv_t, grad_CC.reshape(-1, C, C)), inv_t)
        return prod.view(inv_CC.shape).tril_(-1).neg_()


def unit_lower_inverse(a_CC: torch.Tensor) -> torch.Tensor:
    """Inverse of ``I + strictly_lower(a)`` over the last two dims, with matmuls only.

    Recursive block doubling: knowing the inverses A⁻¹, D⁻¹ of the two diagonal halves of a
    block ``[[A, 0], [B, D]]``, its inverse is ``[[A⁻¹, 0], [−D⁻¹ B A⁻¹, D⁻¹]]``. Starting from 1×1
    blocks (inverse 1), log₂C batched rounds give the full inverse for ≈ C³/3 FLOPs — no sequential
    substitution and no ``solve_triangular`` (slow on CPU, absent from some NPU/compile paths).
    C is padded with identity rows up to a power of two. Chunks of ≤ 16 use the product form of the
    finite Neumann series instead, ``(I + N)(I + N²)(I + N⁴)…`` with N = −L (Nᶜ = 0): fewer ops,
    more FLOPs. Backward is analytic (two matmuls).
    """
    return _UnitLowerInverse.apply(a_CC)


class _ContiguousGrad(torch.autograd.Function):
    """Identity whose backward makes the incoming gradient contiguous (it arrives as a transposed
    view, which CPU batched matmuls would otherwise copy matrix by matrix)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


_contiguous_grad = _ContiguousGrad.apply


class _ChunkScan(torch.autograd.Function):
    """The states entering each chunk, ``S_0 = 0``, ``S_{i+1} = trans_i S_i + write_i``, as one autograd node.

    ``trans [X, n, Dk, Dk]``, ``write [X, n, Dk, Dv]`` → ``S [X, n, Dk, Dv]`` (the last chunk's ``trans``
    and ``write`` are unused). Backward runs the adjoint scan ``G_i = dS_i + trans_iᵀ G_{i+1}`` (G = total
    gradient of ``S_i``), then ``dwrite_i = G_{i+1}`` and ``dtrans_i = G_{i+1} S_iᵀ`` in one batched matmul;
    as plain autograd the 2(n−1) tiny matmuls would each be a graph node of their own.
    """

    @staticmethod
    def forward(ctx, trans_XnKK, write_XnKV):
        states = [write_XnKV.new_zeros(write_XnKV.shape[0], *write_XnKV.shape[2:])]
        for i in range(write_XnKV.shape[1] - 1):
            states.append(torch.baddbmm(write_XnKV[:, i], trans_XnKK[:, i], states[-1]))
        S_XnKV = torch.stack(states, dim=1)
        ctx.save_for_backward(trans_XnKK, S_XnKV)
        return S_XnKV

    @staticmethod
    def backward(ctx, dS_XnKV):
        trans_XnKK, S_XnKV = ctx.saved_tensors
        n = S_XnKV.shape[1]
        if n == 1:
            return torch.zeros_like(trans_XnKK), torch.zeros_like(S_XnKV)
        grads = [dS_XnKV[:, n - 1]]  # G_{n−1}, G_{n−2}, …, G_1
        for i in range(n - 2, 0, -1):
            grads.append(torch.baddbmm(dS_XnKV[:, i], trans_XnKK[:, i].transpose(-1, -2), grads[-1]))
        G_XmKV = torch.stack(grads[::-1], dim=1)  # G_1 … G_{n−1}: the gradients of write_0 … write_{n−2}
        dtrans_XmKK = G_XmKV @ S_XnKV[:, :-1].transpose(-1, -2)
        return F.pad(dtrans_XmKK, (0, 0, 0, 0, 0, 1)), F.pad(G_XmKV, (0, 0, 0, 0, 0, 1))


_chunk_scan = _ChunkScan.apply


def chunk_gated_delta_rule(
    q_BTHD: torch.Tensor,
    k_BTHD: torch.Tensor,
    v_BTVD: torch.Tensor,
    g_BTV: torch.Tensor,
    beta_BTV: torch.Tensor,
    *,
    chunk_size: int = 64,
    use_qk_l2norm: bool = True,
) -> torch.Tensor:
    """Chunked gated delta rule in fp32; returns ``o [B, T, Hv, Dv]`` in ``q``'s dtype.

    Args:
        q_BTHD, k_BTHD: queries/keys ``[B, T, Hk, Dk]``; v_BTVD: values ``[B, T, Hv, Dv]`` (Hv multiple of Hk).
        g_BTV: log decay (≤ 0) ``[B, T, Hv]``; beta_BTV: write strength in (0, 1) ``[B, T, Hv]``.
        chunk_size: tokens per chunk; T is zero-padded to a multiple (padding cannot affect earlier tokens).
        use_qk_l2norm: L2-normalise q and k first (Qwen3.5 does).
    """
    out_dtype, T = q_BTHD.dtype, q_BTHD.shape[1]
    q, k, v, g, beta = _prepare(q_BTHD, k_BTHD, v_BTVD, g_BTV, beta_BTV, use_qk_l2norm)
    B, Hv, _, Dk = k.shape
    Dv = v.shape[-1]
    C = chunk_size
    pad = (-T) % C
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (T + pad) // C
    # [B·Hv, n chunks, C, dim]: one batch dim keeps the scan in 3-D baddbmm
    q, k, v = (x.reshape(B * Hv, n, C, x.shape[-1]) for x in (q, k, v))
    beta, g = beta.reshape(B * Hv, n, C, 1), g.reshape(B * Hv, n, C)

    gcum = g.cumsum(-1)  # log of the decay from the chunk start to each position
    egcum = gcum.exp()
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    # decay_CC[i, j] = exp(gcum_i − gcum_j) for j ≤ i, else 0 (masked before exp: no overflow)
    decay_CC = (gcum.unsqueeze(-1) - gcum.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()
    k_beta = k * beta
    tinv_CC = unit_lower_inverse((k_beta @ k.transpose(-1, -2)) * decay_CC)
    # UT transform, both halves in one matmul: u = T⁻¹ β v (values to write),
    # w = T⁻¹ β k exp(gcum) (keys that read the old state); uw = [u | w]
    uw = tinv_CC @ torch.cat((v * beta, k_beta * egcum.unsqueeze(-1)), dim=-1)
    attn_CC = (q @ k.transpose(-1, -2)) * decay_CC
    kT_end = (k * (gcum[..., -1:] - gcum).exp().unsqueeze(-1)).transpose(-1, -2)  # decayed to the chunk end

    # With S_i the state entering chunk i, v_new = u − w S_i gives
    #   o_i = (q e^gcum − A w) S_i + A u,   S_{i+1} = (e^gcum_end I − kᵀ w) S_i + kᵀ u,
    # so the only sequential work is one [Dk, Dk] × [Dk, Dv] multiply-add per chunk.
    write_KV, kTw_KK = (kT_end @ uw).split([Dv, Dk], dim=-1)
    eye = torch.eye(Dk, dtype=q.dtype, device=q.device)
    trans_KK = egcum[..., -1, None, None] * eye - kTw_KK
    S_nKV = _chunk_scan(trans_KK, write_KV)
    attn_u, attn_w = (attn_CC @ uw).split([Dv, Dk], dim=-1)
    o = _contiguous_grad((q * egcum.unsqueeze(-1) - attn_w) @ S_nKV + attn_u)
    o = o.reshape(B, Hv, n * C, Dv)
    if pad:  # (an identity slice would still zero-fill a full-size gradient in backward)
        o = o[:, :, :T]
    return o.transpose(1, 2).to(out_dtype).contiguous()


def recurrent_gated_delta_rule(
    q_BTHD: torch.Tensor,
    k_BTHD: torch.Tensor,
    v_BTVD: torch.Tensor,
    g_BTV: torch.Tensor,
    beta_BTV: torch.Tensor,
    *,
    use_qk_l2norm: bool = True,
) -> torch.Tensor:
    """The defining per-token recurrence (slow; the reference the chunked kernel is tested against)."""
    out_dtype, T = q_BTHD.dtype, q_BTHD.shape[1]
    q, k, v, g, beta = _prepare(q_BTHD, k_BTHD, v_BTVD, g_BTV, beta_BTV, use_qk_l2norm)
    B, Hv, _, Dk = k.shape
    state = q.new_zeros(B, Hv, Dk, v.shape[-1])
    outs = []
    for t in range(T):
        state = state * g[:, :, t].exp()[..., None, None]
        k_t = k[:, :, t]
        delta = (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", state, k_t)) * beta[:, :, t, None]
        state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, :, t]))
    return torch.stack(outs, dim=1).to(out_dtype)


class _CausalDepthwiseConv1d(torch.autograd.Function):
    """``out[t] = Σ_j w[j] · x[t + j − (K−1)]`` (zero before t = 0) with a hand-written backward: the
    autograd graph of the K shifted slices would zero-fill and scatter a padded copy of ``x`` per tap."""

    @staticmethod
    def forward(ctx, x_BTC, w_KC):
        T, K = x_BTC.shape[1], w_KC.shape[0]
        xp_BTC = F.pad(x_BTC, (0, 0, K - 1, 0))
        out_BTC = xp_BTC[:, K - 1 :] * w_KC[K - 1]
        for j in range(K - 1):
            out_BTC.addcmul_(xp_BTC[:, j : j + T], w_KC[j])
        ctx.save_for_backward(xp_BTC, w_KC)
        return out_BTC

    @staticmethod
    def backward(ctx, dout_BTC):
        xp_BTC, w_KC = ctx.saved_tensors
        T, K = dout_BTC.shape[1], w_KC.shape[0]
        dx_BTC = dw_KC = None
        if ctx.needs_input_grad[0]:
            # dx[t] = Σ_j w[j] · dout[t + (K−1) − j] (zero past the end)
            doutp_BTC = F.pad(dout_BTC, (0, 0, 0, K - 1))
            dx_BTC = doutp_BTC[:, :T] * w_KC[K - 1]
            for j in range(K - 1):
                dx_BTC.addcmul_(doutp_BTC[:, K - 1 - j : K - 1 - j + T], w_KC[j])
        if ctx.needs_input_grad[1]:
            dw_KC = torch.stack([(dout_BTC * xp_BTC[:, j : j + T]).sum((0, 1)) for j in range(K)])
        return dx_BTC, dw_KC


def causal_depthwise_conv1d(x_BTC: torch.Tensor, w_C1K: torch.Tensor) -> torch.Tensor:
    """``conv1d(x, w, groups=C, padding=K−1)[:T]`` in ``[B, T, C]`` layout, as K shifted multiply-adds.

    Same values as the grouped ``F.conv1d`` (PyTorch convolutions are cross-correlations:
    ``out[t] = Σ_j w[j] · x[t + j − (K−1)]``) without its two transposes; several times faster for
    depthwise kernels on CPU. Forward and backward are each K fused multiply-adds (an
    ``autograd.Function``).
    """
    return _CausalDepthwiseConv1d.apply(x_BTC, w_C1K.squeeze(1).t().to(x_BTC.dtype))


FLA_GVA_VERSION = (0, 5, 0)
"""First flash-linear-attention release whose ``chunk_gated_delta_rule`` takes fewer q/k heads than
value heads (grouped values, fla commit ca3905f0). Before it, H is read from ``q`` and only part of
``o`` is written: no error, wrong and partly uninitialised output."""


def fla_supports_grouped_values(version: str) -> bool:
    """Whether fla ``version`` accepts q/k with fewer heads than v (see ``FLA_GVA_VERSION``)."""
    from torch.torch_version import TorchVersion  # packaging's version comparison, vendored by torch

    try:
        return TorchVersion(version) >= FLA_GVA_VERSION
    except Exception:  # an unparsable version string: assume the old behaviour (repeating is always correct)
        return False


@functools.cache
def _fla_chunk_gated_delta_rule() -> tuple[Callable[..., Any], bool] | None:
    """fla's Triton kernel and whether it takes grouped values, when installed (CUDA only), else None;
    imported lazily, once (so the notice below is logged once per process)."""
    try:
        import fla
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_kernel
    except Exception:  # fla missing or broken (e.g. no triton): the pure-PyTorch path is used
        return None
    version = str(getattr(fla, "__version__", "0"))
    grouped = fla_supports_grouped_values(version)
    if not grouped:
        log.warning(
            "fla %s predates grouped values (0.5.0): q/k heads are repeated to the value head count "
            "before its kernel; upgrade flash-linear-attention to skip that copy",
            version,
        )
    return fla_kernel, grouped


FLA_DTYPES = (torch.bfloat16, torch.float16)
"""Input dtypes fla's ``chunk_gated_delta_rule`` takes: releases 0.2–0.3 assert ``q.dtype !=
torch.float32`` ("ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.",
fla/ops/gated_delta_rule/chunk.py); later ones accept float32 but only bf16/fp16 is its fast path."""


@functools.cache
def _warn_fla_dtype(dtype: torch.dtype) -> None:
    log.warning(
        "fla's gated delta rule takes bf16/fp16 inputs only; the %s activations use the pure-PyTorch "
        "chunked path instead (slower; set param_dtype=bfloat16 to use fla)",
        str(dtype).replace("torch.", ""),
    )


def fla_kernel_for(x: torch.Tensor) -> tuple[Callable[..., Any], bool] | None:
    """fla's kernel (and whether it groups values) for activations like ``x``: CUDA and bf16/fp16 only;
    None (the pure-PyTorch path) otherwise, with a one-time warning when fla is there but ``x`` is fp32."""
    if not x.is_cuda:
        return None
    fla = _fla_chunk_gated_delta_rule()
    if fla is None:
        return None
    if x.dtype not in FLA_DTYPES:
        _warn_fla_dtype(x.dtype)
        return None
    return fla


def deltanet_path(device_type: str, dtype: torch.dtype) -> str:
    """Which gated-delta-rule kernel the layers run on ``device_type`` with activations of ``dtype``, in
    words (for the manifest): fla's where ``fla_kernel_for`` would take it, else the chunked PyTorch path,
    which computes in float32 (on NPU always: fla is CUDA/Triton only)."""
    if device_type == "cuda" and dtype in FLA_DTYPES and _fla_chunk_gated_delta_rule() is not None:
        return "fla chunk_gated_delta_rule"
    return "chunked PyTorch, float32"


def fla_gated_delta_rule(
    kernel: Callable[..., Any],
    grouped_values: bool,
    q_BTHD: torch.Tensor,
    k_BTHD: torch.Tensor,
    v_BTVD: torch.Tensor,
    g_BTV: torch.Tensor,
    beta_BTV: torch.Tensor,
) -> torch.Tensor:
    """fla's ``chunk_gated_delta_rule`` on our layout; q/k heads are repeated to Hv first when the
    installed fla cannot group values (each q/k head serves Hv/Hk consecutive value heads, as in
    ``_prepare`` and transformers' ``repeat_interleave``)."""
    Hk, Hv = k_BTHD.shape[2], v_BTVD.shape[2]
    if Hk != Hv and not grouped_values:
        q_BTHD, k_BTHD = _repeat_heads(q_BTHD, Hv // Hk), _repeat_heads(k_BTHD, Hv // Hk)
    o_BTVD, _ = kernel(q_BTHD, k_BTHD, v_BTVD, g=g_BTV, beta=beta_BTV, use_qk_l2norm_in_kernel=True)
    return o_BTVD


class GatedDeltaNet(nn.Module):
    """Qwen3.5's linear-attention mixer: projections, causal depthwise conv + SiLU, gated delta rule,
    gated RMSNorm per value head, output projection. Parameter names follow transformers."""

    use_fla: bool = True
    """Use fla's kernel on CUDA when it is importable."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        H = cfg.hidden_size
        self.num_k_heads, self.num_v_heads = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.head_k_dim, self.head_v_dim = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.key_dim = self.num_k_heads * self.head_k_dim
        self.value_dim = self.num_v_heads * self.head_v_dim
        self.chunk_size = cfg.gdn_chunk_size
        conv_dim = 2 * self.key_dim + self.value_dim
        self.conv1d = nn.Conv1d(
            conv_dim,
            conv_dim,
            cfg.linear_conv_kernel_dim,
            groups=conv_dim,
            bias=False,
            padding=cfg.linear_conv_kernel_dim - 1,
        )
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = RMSNormGated(self.head_v_dim, eps=cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, H, bias=False)
        self.in_proj_qkv = nn.Linear(H, conv_dim, bias=False)
        self.in_proj_z = nn.Linear(H, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(H, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(H, self.num_v_heads, bias=False)

    def forward(self, x_BTH: torch.Tensor) -> torch.Tensor:
        B, T, _ = x_BTH.shape
        qkv_BTC = F.silu(causal_depthwise_conv1d(self.in_proj_qkv(x_BTH), self.conv1d.weight))
        q, k, v = qkv_BTC.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q_BTHD = q.reshape(B, T, self.num_k_heads, self.head_k_dim)
        k_BTHD = k.reshape(B, T, self.num_k_heads, self.head_k_dim)
        v_BTVD = v.reshape(B, T, self.num_v_heads, self.head_v_dim)
        beta_BTV = self.in_proj_b(x_BTH).sigmoid()
        g_BTV = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x_BTH).float() + self.dt_bias)

        fla = fla_kernel_for(q_BTHD) if self.use_fla else None
        if fla is not None:
            o_BTVD = fla_gated_delta_rule(*fla, q_BTHD, k_BTHD, v_BTVD, g_BTV, beta_BTV)
        else:
            o_BTVD = chunk_gated_delta_rule(
                q_BTHD, k_BTHD, v_BTVD, g_BTV, beta_BTV, chunk_size=self.chunk_size
            )
        z_BTVD = self.in_proj_z(x_BTH).view(B, T, self.num_v_heads, self.head_v_dim)
        o_BTVD = self.norm(o_BTVD, z_BTVD)
        return self.out_proj(o_BTVD.reshape(B, T, self.value_dim))
