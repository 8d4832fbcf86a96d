"""Sparse MoE block: softmax top-k router, fused 3-D experts run by grouped GEMM, sigmoid-gated shared expert.

Experts are stored as transformers stores them: ``gate_up_proj [E, 2I, H]`` (rows ``:I`` gate, ``I:`` up)
and ``down_proj [E, H, I]``. Token rows are sorted by expert and every expert's GEMM runs in one
grouped-GEMM call. Back-ends (``Experts.impl``):

- ``grouped_mm``: ``torch.nn.functional.grouped_mm`` (or ``torch._grouped_mm``) with int32 offsets;
- ``loop``: one ``F.linear`` per expert (portable reference; needs the counts on the host);
- ``npu``: ``torch_npu.npu_grouped_matmul`` in an ``autograd.Function`` (imported only when used);
- ``auto`` (default): ``npu`` on NPU; ``grouped_mm`` where torch has it (on CUDA: for bf16 only,
  the dtype its kernel takes); else ``loop``.
"""

from __future__ import annotations

import functools
import logging
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from fsdpbench.config import ModelConfig
from fsdpbench.model.layers import MLP

ExpertsImpl = Literal["auto", "grouped_mm", "loop", "npu"]
log = logging.getLogger(__name__)

NPU_K_GROUPED_MIN_VERSION = "2.6.0.post3 (2.6 line) / 2.7.1 (2.7 line)"
"""torch_npu releases whose op-plugin (7.2) has K-grouped ``npu_grouped_matmul`` (``group_type=2``, the
expert weight gradient). op-plugin's own API page lists only ``group_type`` -1 and 0 for Atlas A2/A3 at
some commits (docs/context/torch_npu-npu_grouped_matmul.md @ 4a859cf6), so a release is also checked by
one small call against the loop (``npu_k_grouped_supported``)."""


def _grouped_mm_fn():
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def resolve_experts_impl(impl: ExpertsImpl, device: torch.device, dtype: torch.dtype = torch.bfloat16) -> str:
    """The concrete back-end for ``impl`` on ``device`` for activations of ``dtype``."""
    if impl != "auto":
        return impl
    if device.type == "npu":
        return "npu"
    if _grouped_mm_fn() is None or (device.type == "cuda" and dtype != torch.bfloat16):
        return "loop"  # torch's CUDA grouped GEMM takes bf16 only
    return "grouped_mm"


def npu_grouped_matmul_args(counts_E: torch.Tensor) -> dict[str, dict]:
    """Keyword arguments of the three ``torch_npu.npu_grouped_matmul`` calls of ``_NpuGroupedLinear``.

    All three take the group boundaries as cumulative row counts (``group_list_type=0``, int64): the
    K-grouped weight-gradient call (``group_type=2``) is exercised upstream only with cumulative sums,
    and the op's documentation defines both forms, so one form serves all three calls.
    """
    group_list = torch.cumsum(counts_E, 0, dtype=torch.int64)
    m_split = {"group_list": group_list, "split_item": 2, "group_type": 0, "group_list_type": 0}
    return {
        "forward": m_split,
        "dgrad": m_split,
        "wgrad": {"group_list": group_list, "split_item": 3, "group_type": 2, "group_list_type": 0},
    }


def torch_npu_version_has_k_grouped(version: str | None) -> bool:
    """Whether torch_npu ``version`` is at least ``NPU_K_GROUPED_MIN_VERSION`` on its line (2.8 and later:
    yes; before 2.6: no; an unparsable version: no)."""
    from torch.torch_version import TorchVersion

    try:
        v = TorchVersion(str(version).split("+")[0])
        if v >= (2, 8):
            return True
        if v >= (2, 7):
            return v >= TorchVersion("2.7.1")
        return v >= TorchVersion("2.6.0.post3")
    except Exception:  # noqa: BLE001 - None or a string packaging cannot read
        return False


def wgrad_loop(x_SK: torch.Tensor, dy_SN: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
    """``dw[e] = x[rows of e]ᵀ @ dy[rows of e]`` (``[E, K, N]``) one expert at a time: the fallback of
    the K-grouped call (reads the counts on the host)."""
    sizes = counts_E.tolist()
    return torch.stack([x.t() @ d for x, d in zip(x_SK.split(sizes), dy_SN.split(sizes), strict=True)])


NPU_PROBE_COUNTS = (64, 0, 128)
"""Rows per expert of the K-grouped probe: an empty group between two, each a multiple of 16 rows."""
NPU_PROBE_K = NPU_PROBE_N = 128
"""The probe's K and N (aligned as the model's hidden and expert sizes are; K=N=128 like op-plugin's tests)."""
NPU_PROBE_RTOL = {torch.float32: 5e-3, torch.bfloat16: 2e-2, torch.float16: 1e-2}
"""Norm-wise relative error the probe accepts per dtype (fp32 allows for HF32 matmuls on NPU)."""


@functools.cache
def npu_k_grouped_supported(device: str, dtype: torch.dtype) -> bool:
    """Whether the installed torch_npu computes K-grouped ``npu_grouped_matmul`` (``group_type=2``)
    right on ``device`` for inputs of ``dtype`` (the arm's parameter dtype: the experts' activations):
    its version (``torch_npu_version_has_k_grouped``), then one call in ``dtype`` with aligned shapes
    (K=N=128, groups ``NPU_PROBE_COUNTS`` with an empty one) compared with ``wgrad_loop`` in float32.
    Cached per (device, dtype); logs once why the fallback is used."""
    import torch_npu

    version = getattr(torch_npu, "__version__", None)
    if not torch_npu_version_has_k_grouped(version):
        log.warning(
            "torch_npu %s has no K-grouped npu_grouped_matmul (group_type=2; needs torch_npu >= %s): the "
            "experts' weight gradient runs one matmul per expert (a host sync per MoE layer in backward)",
            version,
            NPU_K_GROUPED_MIN_VERSION,
        )
        return False
    gen = torch.Generator().manual_seed(0)
    counts_E = torch.tensor(NPU_PROBE_COUNTS, dtype=torch.int64)
    rows = int(counts_E.sum())
    x_SK = torch.randn(rows, NPU_PROBE_K, generator=gen).to(dtype)
    dy_SN = torch.randn(rows, NPU_PROBE_N, generator=gen).to(dtype)
    want = wgrad_loop(x_SK.float(), dy_SN.float(), counts_E)  # on the host, in float32
    try:
        got = torch_npu.npu_grouped_matmul(
            [x_SK.to(device).t()], [dy_SN.to(device)], **npu_grouped_matmul_args(counts_E.to(device))["wgrad"]
        )[0]
        got = got.float().cpu()
        ok = tuple(got.shape) == tuple(want.shape) and bool(
            torch.linalg.vector_norm(got - want)
            <= NPU_PROBE_RTOL.get(dtype, 1e-2) * torch.linalg.vector_norm(want)
        )
        why = f"its {dtype} result differs from one matmul per expert"
    except Exception as exc:  # noqa: BLE001 - any failure means: use the fallback
        ok, why = (
            False,
            f"it fails in {dtype} ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})",
        )
    if not ok:
        log.warning(
            "torch_npu %s: K-grouped npu_grouped_matmul (group_type=2) cannot be used, %s; the experts' "
            "weight gradient runs one matmul per expert",
            version,
            why,
        )
    return ok


class _NpuGroupedLinear(torch.autograd.Function):
    """``y[rows of e] = x[rows of e] @ w[e]`` with ``w [E, K, N]`` via ``torch_npu.npu_grouped_matmul``
    (``npu_grouped_matmul_args``); backward: dgrad with ``wᵀ`` (M-grouped), wgrad K-grouped."""

    @staticmethod
    def forward(ctx, x_SK, w_EKN, counts_E):
        import torch_npu  # noqa: F401  (only on Ascend)

        ctx.save_for_backward(x_SK, w_EKN, counts_E)
        return torch_npu.npu_grouped_matmul([x_SK], [w_EKN], **npu_grouped_matmul_args(counts_E)["forward"])[
            0
        ]

    @staticmethod
    def backward(ctx, dy_SN):
        import torch_npu

        x_SK, w_EKN, counts_E = ctx.saved_tensors
        args = npu_grouped_matmul_args(counts_E)
        dy_SN = dy_SN.contiguous()
        dx_SK = torch_npu.npu_grouped_matmul([dy_SN], [w_EKN.transpose(1, 2)], **args["dgrad"])[0]
        if npu_k_grouped_supported(str(x_SK.device), x_SK.dtype):
            dw_EKN = torch_npu.npu_grouped_matmul([x_SK.t()], [dy_SN], **args["wgrad"])[0]
        else:
            dw_EKN = wgrad_loop(x_SK, dy_SN, counts_E)
        return dx_SK, dw_EKN, None


def grouped_linear(
    x_SK: torch.Tensor, w_ENK: torch.Tensor, counts_E: torch.Tensor, impl: str
) -> torch.Tensor:
    """Per-expert ``F.linear``: rows of ``x`` are sorted by expert, ``counts[e]`` rows belong to expert e.

    Args:
        x_SK: ``[S, K]`` token rows sorted by expert.
        w_ENK: ``[E, N, K]`` expert weights (nn.Linear layout).
        counts_E: rows per expert (int64, on x's device).
        impl: ``grouped_mm``, ``loop`` or ``npu`` (see ``resolve_experts_impl``).
    Returns:
        ``[S, N]``.
    """
    w_ENK = w_ENK.to(x_SK.dtype)
    if impl == "grouped_mm":
        offs = torch.cumsum(counts_E, 0, dtype=torch.int32)
        return _grouped_mm_fn()(x_SK, w_ENK.transpose(-2, -1), offs=offs)
    if impl == "npu":
        return _NpuGroupedLinear.apply(x_SK, w_ENK.transpose(-2, -1), counts_E)
    if impl == "loop":
        if x_SK.device.type != "cpu":
            _warn_loop(x_SK.device.type, x_SK.dtype)
        chunks = x_SK.split(counts_E.tolist(), dim=0)
        return torch.cat([F.linear(c, w_ENK[e]) for e, c in enumerate(chunks)], dim=0)
    raise ValueError(f"unknown experts implementation {impl!r}; choose auto, grouped_mm, loop or npu")


@functools.cache
def _warn_loop(device_type: str, dtype: torch.dtype) -> None:
    log.warning(
        "the MoE experts run one matmul per expert on %s (%s activations): a host sync per MoE call and "
        "no grouped GEMM, which biases step times; use bfloat16 parameters (torch's CUDA grouped GEMM takes "
        "bf16 only) or a torch that has grouped_mm",
        device_type,
        str(dtype).replace("torch.", ""),
    )


def tokens_per_expert(experts_S: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Rows routed to each expert (int64 ``[E]``), computed on the device without a host sync.

    ``torch.bincount`` reads ``max()``/``min()`` back to the host on CUDA and NPU (a sync per call,
    again in recompute with ``ac=full``); a scatter-add of ones into E zeros needs no size from the host.
    """
    counts_E = torch.zeros(num_experts, dtype=torch.int64, device=experts_S.device)
    return counts_E.scatter_add_(0, experts_S, torch.ones_like(experts_S, dtype=torch.int64))


class TopKRouter(nn.Module):
    """``softmax(x Wᵀ)`` in fp32 over all experts → top-k → renormalised to sum 1 (if ``norm_topk_prob``)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.top_k, self.norm_topk_prob = cfg.num_experts_per_tok, cfg.norm_topk_prob
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))

    def forward(self, x_NH: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits_NE = F.linear(x_NH, self.weight)
        probs_NE = torch.softmax(logits_NE, dim=-1, dtype=torch.float32)
        weights_Nk, experts_Nk = torch.topk(probs_NE, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights_Nk = weights_Nk / weights_Nk.sum(dim=-1, keepdim=True)
        return weights_Nk.to(logits_NE.dtype), experts_Nk


class Experts(nn.Module):
    """All routed experts as two 3-D parameters; ``forward`` runs each token through its top-k experts."""

    impl: ExpertsImpl = "auto"

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        E, H, Im = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.num_experts = E
        self.gate_up_proj = nn.Parameter(torch.empty(E, 2 * Im, H))
        self.down_proj = nn.Parameter(torch.empty(E, H, Im))

    def forward(self, x_NH: torch.Tensor, weights_Nk: torch.Tensor, experts_Nk: torch.Tensor) -> torch.Tensor:
        N, k = experts_Nk.shape
        impl = resolve_experts_impl(self.impl, x_NH.device, x_NH.dtype)
        flat_experts = experts_Nk.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)  # (token, slot) pairs grouped by expert
        counts_E = tokens_per_expert(flat_experts, self.num_experts)
        x_SH = x_NH.index_select(0, order // k)
        gate_SI, up_SI = grouped_linear(x_SH, self.gate_up_proj, counts_E, impl).chunk(2, dim=-1)
        y_SH = grouped_linear(F.silu(gate_SI) * up_SI, self.down_proj, counts_E, impl)
        # un-sort, weight, then sum the k expert outputs of each token (deterministic, unlike index_add_)
        y_NkH = torch.empty_like(y_SH).index_copy(0, order, y_SH).view(N, k, -1)
        return (y_NkH * weights_Nk.unsqueeze(-1)).sum(dim=1)


class SparseMoeBlock(nn.Module):
    """Router + routed experts + (optional) shared expert gated by ``sigmoid(shared_expert_gate(x))``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate = TopKRouter(cfg)
        self.experts = Experts(cfg)
        if cfg.shared_expert_intermediate_size:
            self.shared_expert = MLP(cfg.hidden_size, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)

    def forward(self, x_BTH: torch.Tensor) -> torch.Tensor:
        x_NH = x_BTH.reshape(-1, x_BTH.shape[-1])
        weights_Nk, experts_Nk = self.gate(x_NH)
        y_NH = self.experts(x_NH, weights_Nk, experts_Nk)
        if hasattr(self, "shared_expert"):
            y_NH = y_NH + torch.sigmoid(self.shared_expert_gate(x_NH)) * self.shared_expert(x_NH)
        return y_NH.view_as(x_BTH)
