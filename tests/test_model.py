"""The workload model: kernels against their references, counts, seeded init, loss, training."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from fsdpbench.config import ModelConfig, preset_full, preset_tiny
from fsdpbench.errors import ConfigError
from fsdpbench.model import (
    build_model,
    flops_per_token,
    init_full_tensor,
    init_weights,
    params_per_layer,
    total_params,
)
from fsdpbench.model.deltanet import (
    causal_depthwise_conv1d,
    chunk_gated_delta_rule,
    recurrent_gated_delta_rule,
    unit_lower_inverse,
)
from fsdpbench.model.hf import config_from_hf, hf_config_kwargs
from fsdpbench.model.moe import Experts, grouped_linear

torch.set_num_threads(1)


def _gdn_inputs(B=2, T=45, Hk=2, Hv=4, Dk=8, Dv=12, seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, Hk, Dk, generator=gen)
    k = torch.randn(B, T, Hk, Dk, generator=gen)
    v = torch.randn(B, T, Hv, Dv, generator=gen)
    g = -F.softplus(torch.randn(B, T, Hv, generator=gen))  # log decay <= 0
    beta = torch.rand(B, T, Hv, generator=gen)
    return [x.requires_grad_(grad) for x in (q, k, v, g, beta)]


@pytest.mark.parametrize("chunk_size", [1, 8, 16, 64])
def test_chunked_gated_delta_rule_equals_per_token_recurrence(chunk_size):
    # T = 45 is not a multiple of any chunk > 1: the internal padding must not change the outputs
    inputs = _gdn_inputs()
    ref = recurrent_gated_delta_rule(*inputs)
    out = chunk_gated_delta_rule(*inputs, chunk_size=chunk_size)
    assert out.shape == ref.shape == (2, 45, 4, 12)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_chunked_gated_delta_rule_gradients_equal_recurrence_gradients():
    inputs = _gdn_inputs(T=20, grad=True)
    weights = torch.randn(2, 20, 4, 12, generator=torch.Generator().manual_seed(5))
    grads_ref = torch.autograd.grad((recurrent_gated_delta_rule(*inputs) * weights).sum(), inputs)
    grads = torch.autograd.grad((chunk_gated_delta_rule(*inputs, chunk_size=8) * weights).sum(), inputs)
    for got, want in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("size", [1, 5, 16, 20, 64])
def test_matmul_only_unit_lower_inverse_equals_linalg_inverse(size):
    a = torch.randn(3, size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 0.3
    unit_lower = torch.eye(size, dtype=torch.float64) + a.tril(-1)
    torch.testing.assert_close(unit_lower_inverse(a), torch.linalg.inv(unit_lower))


def test_shifted_depthwise_conv_equals_grouped_conv1d():
    x = torch.randn(2, 11, 6)
    w = torch.randn(6, 1, 4)
    ref = F.conv1d(x.transpose(1, 2), w, padding=3, groups=6)[..., :11].transpose(1, 2)
    torch.testing.assert_close(causal_depthwise_conv1d(x, w), ref)


def _experts(impl: str, seed: int = 0) -> Experts:
    cfg = preset_tiny()
    experts = Experts(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.randn(experts.gate_up_proj.shape, generator=gen) * 0.1)
        experts.down_proj.copy_(torch.randn(experts.down_proj.shape, generator=gen) * 0.1)
    experts.impl = impl
    return experts


def test_grouped_mm_experts_equal_per_expert_loop_in_values_and_gradients():
    cfg = preset_tiny()
    N, k = 37, cfg.num_experts_per_tok
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(N, cfg.hidden_size, generator=gen)
    experts_Nk = torch.randint(0, cfg.num_experts - 1, (N, k), generator=gen)  # expert E-1 gets no token
    weights = torch.softmax(torch.randn(N, k, generator=gen), -1)
    results = {}
    for impl in ("grouped_mm", "loop"):
        module = _experts(impl)
        xi, wi = x.clone().requires_grad_(), weights.clone().requires_grad_()
        y = module(xi, wi, experts_Nk)
        y.backward(torch.cos(y.detach()))
        results[impl] = (y, xi.grad, wi.grad, module.gate_up_proj.grad, module.down_proj.grad)
    assert results["loop"][3][-1].abs().sum() == 0  # the idle expert has zero gradient
    for got, want in zip(results["grouped_mm"], results["loop"], strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_grouped_linear_loop_equals_dense_reference():
    gen = torch.Generator().manual_seed(3)
    counts = torch.tensor([2, 0, 3])
    x = torch.randn(5, 4, generator=gen)
    w = torch.randn(3, 6, 4, generator=gen)
    rows_expert = [0, 0, 2, 2, 2]
    ref = torch.stack([w[e] @ x[i] for i, e in enumerate(rows_expert)])
    torch.testing.assert_close(grouped_linear(x, w, counts, "loop"), ref)
    torch.testing.assert_close(grouped_linear(x, w, counts, "grouped_mm"), ref)


def test_full_config_has_34_660_610_688_parameters_on_meta():
    model = build_model(preset_full(), device="meta")
    n = sum(p.numel() for p in model.parameters())
    assert n == 34_660_610_688 == total_params(preset_full())
    per = params_per_layer(preset_full())
    layers = model.model.layers
    assert sum(p.numel() for p in layers[0].parameters()) == per["linear_attention"] == 842_700_992
    assert sum(p.numel() for p in layers[3].parameters()) == per["full_attention"] == 836_246_016
    assert [layer.layer_type for layer in layers[:8]] == ["linear_attention"] * 3 + ["full_attention"] + [
        "linear_attention"
    ] * 3 + ["full_attention"]


def test_parameter_shapes_follow_transformers_layout():
    cfg = preset_full()
    shapes = {n: tuple(p.shape) for n, p in build_model(cfg).named_parameters()}
    E, H, Im = 256, 2048, 512
    assert shapes["model.layers.0.mlp.experts.gate_up_proj"] == (E, 2 * Im, H)
    assert shapes["model.layers.0.mlp.experts.down_proj"] == (E, H, Im)
    assert shapes["model.layers.0.linear_attn.in_proj_qkv.weight"] == (8192, H)
    assert shapes["model.layers.0.linear_attn.conv1d.weight"] == (8192, 1, 4)
    assert shapes["model.layers.3.self_attn.q_proj.weight"] == (16 * 256 * 2, H)
    assert shapes["model.layers.3.self_attn.k_proj.weight"] == (2 * 256, H)
    assert shapes["model.layers.3.mlp.shared_expert_gate.weight"] == (1, H)
    assert shapes["lm_head.weight"] == shapes["model.embed_tokens.weight"] == (248320, H)


def test_model_has_no_buffers():
    assert list(build_model(preset_tiny()).named_buffers()) == []


def _materialise_on_meta_then_init(cfg, seed):
    model = build_model(cfg, device="meta")
    model.to_empty(device="cpu")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_full_tensor(name, p.shape, seed))
    return model


def test_same_seed_gives_same_weights_meta_then_materialise_vs_direct_build():
    cfg = preset_tiny()
    direct = build_model(cfg, device="cpu")
    init_weights(direct, seed=7)
    via_meta = _materialise_on_meta_then_init(cfg, seed=7)
    other_seed = _materialise_on_meta_then_init(cfg, seed=8)
    a, b, c = direct.state_dict(), via_meta.state_dict(), other_seed.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=0, rtol=0)
    assert not torch.equal(
        a["model.layers.0.mlp.experts.down_proj"], c["model.layers.0.mlp.experts.down_proj"]
    )


def test_init_full_tensor_is_the_same_value_in_every_dtype_and_per_name():
    shape = (16, 8)
    full = init_full_tensor("model.layers.1.mlp.gate.weight", shape, seed=3)
    assert torch.equal(
        init_full_tensor("model.layers.1.mlp.gate.weight", shape, 3, dtype=torch.bfloat16), full.bfloat16()
    )
    assert not torch.equal(init_full_tensor("model.layers.2.mlp.gate.weight", shape, 3), full)
    assert abs(full.std().item() - 0.02) < 0.006
    assert torch.equal(init_full_tensor("model.layers.0.input_layernorm.weight", (4,), 3), torch.zeros(4))
    assert torch.equal(init_full_tensor("model.layers.0.linear_attn.norm.weight", (4,), 3), torch.ones(4))
    a_log = init_full_tensor("model.layers.0.linear_attn.A_log", (64,), 3)
    assert a_log.min() >= 0 and a_log.max() <= math.log(16)


def _seeded_tiny(seed=0, **overrides):
    cfg = preset_tiny().replace(**overrides)
    model = build_model(cfg, device="cpu")
    init_weights(model, seed)
    return cfg, model


def test_chunked_loss_and_gradients_equal_full_logits_cross_entropy():
    cfg, model = _seeded_tiny(loss_chunk_size=7)  # 3 × 20 tokens → chunks that straddle sequences
    ids = torch.randint(0, cfg.vocab_size, (3, 20), generator=torch.Generator().manual_seed(4))
    labels = ids.clone()
    labels[0, :5] = -100
    loss = model(ids, labels=labels).loss
    grads = torch.autograd.grad(loss, list(model.parameters()))
    logits = model(ids).logits
    assert logits.shape == (3, 20, cfg.vocab_size)
    ref = F.cross_entropy(
        logits[:, :-1].reshape(-1, cfg.vocab_size), labels[:, 1:].reshape(-1), ignore_index=-100
    )
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    torch.testing.assert_close(loss, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_loss_falls_when_the_tiny_model_overfits_one_batch():
    cfg, model = _seeded_tiny()
    ids = torch.randint(0, cfg.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert abs(losses[0] - math.log(cfg.vocab_size)) < 0.1  # near-uniform predictions at init
    assert losses[-1] < 0.5 * losses[0], losses


def test_any_sequence_length_runs_including_one_token():
    cfg, model = _seeded_tiny()
    for T in (1, 17):
        assert model(torch.zeros(1, T, dtype=torch.long)).logits.shape == (1, T, cfg.vocab_size)


def test_flops_per_token_matches_hand_arithmetic_of_the_reference():
    # reference/qwen35_arch.md §2: forward 6.23 G @2k, 6.40 G @4k, 6.73 G @8k; training = 3 × forward
    for seq_len, fwd in ((2048, 6.23e9), (4096, 6.40e9), (8192, 6.73e9)):
        assert flops_per_token(preset_full(), seq_len) == pytest.approx(3 * fwd, rel=0.01)
    # attention core grows linearly: 10 layers × 2·N·D per token per extra token, × 3 for training
    delta = flops_per_token(preset_full(), 8192) - flops_per_token(preset_full(), 4096)
    assert delta == pytest.approx(3 * 10 * 2 * 16 * 256 * 4096)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"num_attention_heads": 6}, "hidden_size"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"linear_num_value_heads": 6}, "linear_num_value_heads"),
    ],
)
def test_bad_config_raises_value_error_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field) as info:
        preset_tiny().replace(**overrides)
    assert isinstance(info.value, ConfigError)


def test_bad_sequence_length_names_the_rule():
    with pytest.raises(ConfigError, match="seq_len must be an integer >= 1"):
        preset_tiny().validate_seq_len(0)


@pytest.mark.parametrize("size", [6, 20])  # product form (<= 16) and block doubling (padded to 32)
def test_unit_lower_inverse_gradient_equals_autograd_through_linalg_inverse(size):
    a = torch.randn(2, size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.3
    weights = torch.randn(2, size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    a1, a2 = a.clone().requires_grad_(), a.clone().requires_grad_()
    (unit_lower_inverse(a1) * weights).sum().backward()
    (torch.linalg.inv(torch.eye(size, dtype=torch.float64) + a2.tril(-1)) * weights).sum().backward()
    torch.testing.assert_close(a1.grad, a2.grad)


@pytest.mark.parametrize("preset", [preset_full, preset_tiny])
def test_hf_config_kwargs_round_trips_through_config_from_hf(preset):
    """ours → transformers kwargs → ours keeps every field transformers has a name for."""
    cfg = preset()
    back = config_from_hf(hf_config_kwargs(cfg))
    defaults = ModelConfig()
    assert back == dataclasses.replace(
        cfg, gdn_chunk_size=defaults.gdn_chunk_size, loss_chunk_size=defaults.loss_chunk_size
    )
