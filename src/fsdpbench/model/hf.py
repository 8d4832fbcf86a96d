"""Bridge from transformers' ``Qwen3_5MoeTextConfig`` (or its dict) to ``ModelConfig`` and our model.

transformers is not imported here: any object with the config's attributes, or a plain dict such as a
checkpoint's ``config.json`` (whole, or its ``text_config``), works.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fsdpbench.config import ModelConfig
from fsdpbench.errors import ConfigError

_SAME_NAME = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "rms_norm_eps",
    "initializer_range",
    "tie_word_embeddings",
)


def _interval_of(layer_types: list[str]) -> int:
    full = [i for i, t in enumerate(layer_types) if t == "full_attention"]
    interval = full[0] + 1 if full else len(layer_types) + 1
    expected = [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(len(layer_types))
    ]
    if list(layer_types) != expected:
        raise ConfigError(
            f"text_config.layer_types {layer_types} is not the periodic pattern this model supports "
            f"(layer i is full_attention iff (i + 1) % full_attention_interval == 0)"
        )
    return interval


def config_from_hf(text_config: Any) -> ModelConfig:
    """``ModelConfig`` from a transformers ``Qwen3_5MoeTextConfig``, a composite config or a dict."""
    d = text_config if isinstance(text_config, dict) else text_config.to_dict()
    d = d.get("text_config", d)
    if d.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"text_config.hidden_act={d['hidden_act']!r}: only silu (SwiGLU) is implemented")
    if d.get("attention_bias"):
        raise ConfigError("text_config.attention_bias=true is not supported (Qwen3.5 has no biases)")
    values: dict[str, Any] = {k: d[k] for k in _SAME_NAME if d.get(k) is not None}
    rope = d.get("rope_parameters") or {}
    theta = rope.get("rope_theta", d.get("rope_theta"))
    if theta is not None:
        values["rope_theta"] = float(theta)
    factor = rope.get("partial_rotary_factor", d.get("partial_rotary_factor"))
    if factor is not None:
        values["partial_rotary_factor"] = float(factor)
    if d.get("layer_types"):
        values["full_attention_interval"] = _interval_of(d["layer_types"])
    elif d.get("full_attention_interval"):
        values["full_attention_interval"] = int(d["full_attention_interval"])
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    cfg = ModelConfig(**{k: v for k, v in values.items() if k in known})
    cfg.validate()
    return cfg


def hf_config_kwargs(cfg: ModelConfig) -> dict[str, Any]:
    """Keyword arguments of transformers' ``Qwen3_5MoeTextConfig`` for ``cfg`` (the inverse of
    ``config_from_hf``; fields transformers has no name for, such as chunk sizes, are left out)."""
    kwargs: dict[str, Any] = {k: getattr(cfg, k) for k in _SAME_NAME}
    kwargs["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": cfg.rope_theta,
        "partial_rotary_factor": cfg.partial_rotary_factor,
    }
    kwargs["layer_types"] = cfg.layer_types
    return kwargs


def from_hf_config(text_config: Any, device: str = "meta"):
    """Our ``Qwen35MoeForCausalLM`` (on ``device``, default meta) for a transformers text config or dict."""
    from fsdpbench.model.model import build_model

    return build_model(config_from_hf(text_config), device=device)
