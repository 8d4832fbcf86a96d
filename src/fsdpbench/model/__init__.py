"""The Qwen3.5-35B-A3B-shaped MoE workload (text tower, random weights).

Public API::

    model = build_model(cfg, device="meta")       # transformers' Qwen3_5MoeForCausalLM names and shapes
    out = model(input_ids)                        # out.logits [B, T, V]
    out = model(input_ids, labels=labels)         # out.loss (chunked cross-entropy), out.logits None
    InitialValues(shapes, seed).block(name, index)  # any part of a parameter's initial value, alone
    init_full_tensor(name, shape, seed)           # a parameter's full initial value, from (seed, name)
    init_weights(model, seed)                     # fill a materialised (or DTensor-sharded) model
    flops_per_token(cfg, seq_len)                 # training FLOPs per token
    from_hf_config(text_config)                   # from a transformers Qwen3_5MoeTextConfig or dict
"""

from fsdpbench.model.flops import flops_per_token, params_per_layer, total_params
from fsdpbench.model.hf import config_from_hf, from_hf_config
from fsdpbench.model.init import InitialValues, init_full_tensor, init_weights
from fsdpbench.model.model import CausalLMOutput, Qwen35MoeForCausalLM, build_model

__all__ = [
    "CausalLMOutput",
    "InitialValues",
    "Qwen35MoeForCausalLM",
    "build_model",
    "config_from_hf",
    "flops_per_token",
    "from_hf_config",
    "init_full_tensor",
    "init_weights",
    "params_per_layer",
    "total_params",
]
