"""The model shape: ``ModelConfig`` (transformers' Qwen3.5-MoE field names) and its presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fsdpbench.config.types import field_types
from fsdpbench.errors import ConfigError
from fsdpbench.records import Record


@dataclass(kw_only=True)
class ModelConfig(Record):
    """Shape of the Qwen3.5-MoE text model (field names follow transformers' ``Qwen3_5MoeTextConfig``).

    Defaults are Qwen3.5-35B-A3B exactly (reference/qwen35_arch.md §1).
    """

    vocab_size: int = 248320
    hidden_size: int = 2048
    num_hidden_layers: int = 40
    full_attention_interval: int = 4
    """Layer i is full attention iff (i + 1) % interval == 0; the others are Gated DeltaNet."""
    # gated full attention
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10_000_000.0
    # Gated DeltaNet
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    gdn_chunk_size: int = 64
    """Chunk length of the chunked Gated DeltaNet; sequences are padded up to a multiple internally."""
    # MoE (every layer)
    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    norm_topk_prob: bool = True
    # misc
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    loss_chunk_size: int = 2048
    """Tokens per chunk of the chunked cross-entropy (full fp32 logits never exist at once)."""

    @property
    def layer_types(self) -> list[str]:
        """``"full_attention"`` or ``"linear_attention"`` per layer (transformers' names)."""
        k = self.full_attention_interval
        return [
            "full_attention" if (i + 1) % k == 0 else "linear_attention"
            for i in range(self.num_hidden_layers)
        ]

    def validate(self) -> None:
        """Raise ``ConfigError`` (a ``ValueError``) naming the field and the rule it breaks."""
        positive = [
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "full_attention_interval",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
            "gdn_chunk_size",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "loss_chunk_size",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"model.{name} must be an integer >= 1, got {value!r}")
        if self.shared_expert_intermediate_size < 0:
            raise ConfigError(
                f"model.shared_expert_intermediate_size must be >= 0 (0 = no shared expert), "
                f"got {self.shared_expert_intermediate_size}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"model.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"model.num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by "
                f"model.num_attention_heads ({self.num_attention_heads})"
            )
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ConfigError(
                f"model.linear_num_value_heads ({self.linear_num_value_heads}) must be a multiple of "
                f"model.linear_num_key_heads ({self.linear_num_key_heads})"
            )
        if self.num_experts_per_tok > self.num_experts:
            raise ConfigError(
                f"model.num_experts_per_tok ({self.num_experts_per_tok}) must be <= "
                f"model.num_experts ({self.num_experts})"
            )
        for name in ("rms_norm_eps", "rope_theta", "initializer_range"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{name} must be a number > 0, got {value!r}")
        rotary = int(self.head_dim * self.partial_rotary_factor)
        if not 0.0 < self.partial_rotary_factor <= 1.0 or rotary % 2:
            raise ConfigError(
                f"model.partial_rotary_factor ({self.partial_rotary_factor}) × head_dim ({self.head_dim}) "
                f"must give an even number of rotary dims in (0, head_dim]"
            )

    def validate_seq_len(self, seq_len: int) -> None:
        """Refuse a sequence length the model cannot take, naming the rule.

        Any length >= 1 works: the chunked Gated DeltaNet pads internally to a multiple of
        ``gdn_chunk_size`` (padding sits after the last token, so it cannot change any output).
        """
        if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
            raise ConfigError(f"seq_len must be an integer >= 1 (any length works), got {seq_len!r}")

    def replace(self, **overrides: Any) -> ModelConfig:
        """A copy with ``overrides`` applied and validated."""
        cfg = dataclasses.replace(self, **overrides)
        cfg.validate()
        return cfg


def preset_full() -> ModelConfig:
    """Qwen3.5-35B-A3B text model: 40 layers, 34,660,610,688 parameters."""
    return ModelConfig()


def preset_tiny() -> ModelConfig:
    """Every structural feature of the full model at a size that trains in well under a second on CPU.

    4 layers ([GDN ×3, attention]), hidden 64, 4 query / 2 KV heads × 16 (4 rotary dims), GDN 4 key /
    8 value heads × 16, conv 4, 8 experts top-2 of size 32, shared expert 32, vocab 512, GDN chunk 16,
    loss chunk 256: 410,560 parameters. Every parameter's dim 0 divides 2, 4 and 8 except the 1-row
    ``shared_expert_gate``, which sharding plans handle like the full model's. One fwd+bwd step of
    batch 1 × seq 256 takes ~30-50 ms on one CPU core.
    """
    return ModelConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        gdn_chunk_size=16,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        loss_chunk_size=256,
    )


PRESETS = {"full": preset_full, "tiny": preset_tiny}


def model_preset(name: str) -> ModelConfig:
    """Look up a preset by name, or raise a ``ConfigError`` listing the known ones."""
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None


def model_fields() -> dict[str, Any]:
    """The overridable fields of ``ModelConfig``: name → type (for ``coerce``)."""
    return field_types(ModelConfig)
