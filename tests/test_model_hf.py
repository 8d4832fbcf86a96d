"""Our model against transformers' ``Qwen3_5MoeForCausalLM`` (test-only dependency; skipped without it)."""

from __future__ import annotations

import pytest
import torch

from fsdpbench.config import preset_full, preset_tiny
from fsdpbench.model import config_from_hf, from_hf_config

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.qwen3_5_moe")
torch.set_num_threads(1)


def _hf_text_config(cfg, **extra):
    # Written out by hand on purpose (not model.hf.hf_config_kwargs): an independent reference for the bridge.
    return transformers.Qwen3_5MoeTextConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        linear_num_key_heads=cfg.linear_num_key_heads,
        linear_num_value_heads=cfg.linear_num_value_heads,
        linear_key_head_dim=cfg.linear_key_head_dim,
        linear_value_head_dim=cfg.linear_value_head_dim,
        num_experts=cfg.num_experts,
        num_experts_per_tok=cfg.num_experts_per_tok,
        moe_intermediate_size=cfg.moe_intermediate_size,
        shared_expert_intermediate_size=cfg.shared_expert_intermediate_size,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        **extra,
    )


def test_transformers_weights_load_strictly_and_give_same_logits_and_loss_gradient():
    text_config = _hf_text_config(preset_tiny())
    torch.manual_seed(0)
    hf = transformers.Qwen3_5MoeForCausalLM(text_config).float()
    with torch.no_grad():  # non-trivial values everywhere, norms and gates included
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * 0.1 if p.dim() > 1 else torch.rand_like(p) - 0.5)
    ours = from_hf_config(text_config, device="cpu")
    ours.load_state_dict(hf.state_dict(), strict=True)

    ids = torch.randint(0, text_config.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(ours(ids).logits, hf(ids).logits, atol=1e-4, rtol=1e-4)

    hf_loss = hf(ids, labels=ids).loss
    loss = ours(ids, labels=ids).loss
    torch.testing.assert_close(loss, hf_loss, atol=1e-5, rtol=1e-5)
    names = [n for n, _ in hf.named_parameters()]
    hf_grads = dict(zip(names, torch.autograd.grad(hf_loss, list(hf.parameters())), strict=True))
    our_params = dict(ours.named_parameters())
    grads = dict(zip(our_params, torch.autograd.grad(loss, list(our_params.values())), strict=True))
    for name in names:
        scale = hf_grads[name].abs().max().clamp(min=1e-6)
        torch.testing.assert_close(grads[name] / scale, hf_grads[name] / scale, atol=1e-4, rtol=0, msg=name)


def test_full_size_names_and_shapes_equal_transformers_on_meta():
    text_config = _hf_text_config(preset_full())
    with torch.device("meta"):
        hf = transformers.Qwen3_5MoeForCausalLM(text_config)
    ours = from_hf_config(text_config)
    assert {n: p.shape for n, p in ours.named_parameters()} == {n: p.shape for n, p in hf.named_parameters()}
    assert config_from_hf(text_config) == preset_full()
    assert config_from_hf(text_config.to_dict()) == preset_full()
