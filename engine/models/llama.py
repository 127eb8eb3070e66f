"""One Llama-family decoder (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3).

Parameter names follow HF's with the ``model.`` prefix dropped, except that
q/k/v and gate/up are fused into one matmul each (``qkv_proj``,
``gate_up_proj``); `fuse_hf_weights` maps a HF state dict onto them.

The forward pass is free of host syncs and data-dependent Python control flow,
so it can be captured in a CUDA graph.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from agentgate.engine.attention.base import AttentionBackend, AttentionMetadata
from agentgate.engine.errors import ModelLoadError
from agentgate.engine.layers.cpu_linear import PackedLinear, can_pack, pack_linears
from agentgate.engine.layers.norm import RMSNorm
from agentgate.engine.layers.quant_linear import make_quant_linear
from agentgate.engine.layers.quantized import QuantizedWeight, as_dense, cat_rows
from agentgate.engine.layers.rope import rope_tables
from agentgate.engine.models.config import ModelConfig


def _norm(dim: int, config: ModelConfig, attention: AttentionBackend) -> RMSNorm:
    """An RMSNorm running the Triton kernel where attention runs Triton's."""
    return RMSNorm(dim, config.rms_norm_eps, kernel=attention.name == "triton")


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, attention: AttentionBackend) -> None:
        super().__init__()
        self.attention = attention
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.head_dim
        self.q_size, self.kv_size = config.q_size, config.kv_size
        self.scale = config.head_dim**-0.5
        self.qkv_proj = nn.Linear(config.hidden_size, config.q_size + 2 * config.kv_size, bias=config.attention_bias)
        self.o_proj = nn.Linear(config.q_size, config.hidden_size, bias=config.attention_out_bias)
        # Qwen3 normalises each head of q and k before RoPE.
        self.q_norm = _norm(config.head_dim, config, attention) if config.qk_norm else None
        self.k_norm = _norm(config.head_dim, config, attention) if config.qk_norm else None

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        meta: AttentionMetadata,
        k_cache: Tensor,
        v_cache: Tensor,
    ) -> Tensor:
        num_tokens = x.shape[0]
        heads = self.qkv_proj(x).view(num_tokens, -1, self.head_dim)  # every head of q, then k's, then v's
        q, k, v = heads.split([self.num_heads, self.num_kv_heads, self.num_kv_heads], dim=1)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = self.attention.rotary_write_kv(q, k, v, cos, sin, k_cache, v_cache, meta)
        out = self.attention.paged_attention(q, k_cache, v_cache, meta, self.scale)
        return self.o_proj(out.reshape(num_tokens, self.q_size))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, attention: AttentionBackend) -> None:
        super().__init__()
        self.input_layernorm = _norm(config.hidden_size, config, attention)
        self.self_attn = Attention(config, attention)
        self.post_attention_layernorm = _norm(config.hidden_size, config, attention)
        self.mlp = MLP(config)

    def forward(
        self,
        x: Tensor,
        residual: Tensor | None,
        cos: Tensor,
        sin: Tensor,
        meta: AttentionMetadata,
        k_cache: Tensor,
        v_cache: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """(the previous layer's output, the residual stream before it) →
        this layer's; each residual add is fused into the norm after it."""
        if residual is None:
            x, residual = self.input_layernorm(x), x
        else:
            x, residual = self.input_layernorm(x, residual)
        x = self.self_attn(x, cos, sin, meta, k_cache, v_cache)
        x, residual = self.post_attention_layernorm(x, residual)
        return self.mlp(x), residual


class CausalLM(nn.Module):
    """Embeddings, decoder layers, final norm; `compute_logits` applies the
    (possibly tied) LM head to the rows the caller picks.

    A new instance holds placeholder weights: get a real one from
    `engine.loaders.load_model` (or `build_model`). Pick the dtype at load time
    rather than with ``.to(dtype)``, which would also cast the float32 RoPE
    tables.
    """

    def __init__(self, config: ModelConfig, attention: AttentionBackend) -> None:
        super().__init__()
        self.config = config
        self.attention = attention
        # An explicit (uninitialised) weight skips nn.Embedding's normal_()
        # init, which on the meta device imports torch._dynamo (seconds).
        self.embed_tokens = nn.Embedding(
            config.vocab_size,
            config.hidden_size,
            _weight=torch.empty(config.vocab_size, config.hidden_size),
        )
        self.layers = nn.ModuleList(DecoderLayer(config, attention) for _ in range(config.num_layers))
        self.norm = _norm(config.hidden_size, config, attention)
        self.lm_head = (
            None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )
        # Built on the CPU explicitly, so a model constructed on the meta
        # device still gets real tables (moved along by `.to(device)`).
        cos, sin = rope_tables(
            config.head_dim,
            config.max_position_embeddings,
            config.rope_theta,
            scaling=config.rope_scaling,
            freq_factors=config.rope_freq_factors,
            device="cpu",
        )
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(
        self,
        input_ids: Tensor,
        positions: Tensor,
        meta: AttentionMetadata,
        kv_caches: list[tuple[Tensor, Tensor]],
    ) -> Tensor:
        """``input_ids``/``positions`` [T] int64 → hidden states [T, hidden]
        after the final norm. Writes the step's keys/values into ``kv_caches``
        (one ``(k_cache, v_cache)`` per layer)."""
        x, residual = self.embed_tokens(input_ids), None
        cos, sin = self.rope_cos[positions], self.rope_sin[positions]
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            x, residual = layer(x, residual, cos, sin, meta, k_cache, v_cache)
        return self.norm(x, residual)[0]

    def compute_logits(self, hidden: Tensor) -> Tensor:
        """[N, hidden] → [N, vocab] float32."""
        logits = F.linear(hidden, self.embed_tokens.weight) if self.lm_head is None else self.lm_head(hidden)
        return logits.float()

    def pack_for_cpu(self) -> bool:
        """Run every projection and the LM head through weights packed for
        oneDNN (`engine.layers.cpu_linear`); a tied LM head gets its own
        packed copy of the embeddings. False, and nothing changed, where
        that does not apply (not bf16, no native bf16 in oneDNN)."""
        if not can_pack(self.embed_tokens.weight.dtype):
            return False
        pack_linears(self)
        if self.lm_head is None:
            self.lm_head = PackedLinear(self.embed_tokens.weight, None)
        return True

    def make_batch_invariant(self) -> None:
        """For ``--deterministic`` (CPU): every token's result depends on its
        own sequence alone, whatever else the batch holds. Attention runs one
        query token at a time over exactly its context
        (`BatchInvariantTorchBackend`), and a tied LM head becomes a linear of
        its own, so that the load makes it row-invariant with the other
        linears where their kernel is not (`engine.kernel_choice.row_invariance`)."""
        from agentgate.engine.attention.batch_invariant import BatchInvariantTorchBackend

        self.attention = BatchInvariantTorchBackend()
        for layer in self.layers:
            layer.self_attn.attention = self.attention
        self.lm_head = self.head_linear()

    def head_linear(self) -> nn.Module:
        """The LM head as a linear module: its own, or, when tied, one over
        the embeddings' own weight (no copy)."""
        if self.lm_head is not None:
            return self.lm_head
        head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=False, device="meta")
        head.weight = self.embed_tokens.weight
        return head


def fuse_hf_weights(
    config: ModelConfig, weights: Mapping[str, Tensor | QuantizedWeight], *, source: str
) -> dict[str, Tensor | QuantizedWeight]:
    """A HF state dict (``model.`` prefix stripped, unfused q/k/v and gate/up)
    → this module's state dict. Drops ``lm_head`` when embeddings are tied.
    Quantized weights stay quantized where their parts share a form (see
    `cat_rows`). Raises ModelLoadError naming missing, unexpected or
    misshapen weights."""
    expected = hf_weight_shapes(config)
    given = set(weights)
    if config.tie_word_embeddings:
        given.discard("lm_head.weight")
    missing, unexpected = sorted(expected.keys() - given), sorted(given - expected.keys())
    if missing or unexpected:
        raise ModelLoadError(
            f"{source}: weights do not match the {config.architecture} config: "
            f"missing {_preview(missing)}, unexpected {_preview(unexpected)}"
        )
    for name, shape in expected.items():
        if tuple(weights[name].shape) != shape:
            raise ModelLoadError(
                f"{source}: weight {name} has shape {tuple(weights[name].shape)}, the config implies {shape}"
            )
    fused = {n: weights[n] for n in expected if not n.endswith(_FUSED_PARTS)}
    dtype = weights["norm.weight"].dtype
    for i in range(config.num_layers):
        attn, mlp = f"layers.{i}.self_attn", f"layers.{i}.mlp"
        kinds = ("weight", "bias") if config.attention_bias else ("weight",)
        for kind in kinds:
            fused[f"{attn}.qkv_proj.{kind}"] = cat_rows([weights[f"{attn}.{x}_proj.{kind}"] for x in "qkv"], dtype)
        fused[f"{mlp}.gate_up_proj.weight"] = cat_rows(
            [weights[f"{mlp}.gate_proj.weight"], weights[f"{mlp}.up_proj.weight"]], dtype
        )
    return fused


_FUSED_PARTS = tuple(f"{x}_proj.{kind}" for x in ("q", "k", "v", "gate", "up") for kind in ("weight", "bias"))


def hf_weight_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The HF parameters (``model.`` prefix stripped) a checkpoint of
    ``config`` holds, with their shapes."""
    hidden, inter, head_dim = config.hidden_size, config.intermediate_size, config.head_dim
    shapes = {"embed_tokens.weight": (config.vocab_size, hidden), "norm.weight": (hidden,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, hidden)
    proj = {"q": config.q_size, "k": config.kv_size, "v": config.kv_size}
    for i in range(config.num_layers):
        p = f"layers.{i}"
        shapes[f"{p}.input_layernorm.weight"] = (hidden,)
        shapes[f"{p}.post_attention_layernorm.weight"] = (hidden,)
        for x, size in proj.items():
            shapes[f"{p}.self_attn.{x}_proj.weight"] = (size, hidden)
            if config.attention_bias:
                shapes[f"{p}.self_attn.{x}_proj.bias"] = (size,)
        shapes[f"{p}.self_attn.o_proj.weight"] = (hidden, config.q_size)
        if config.attention_out_bias:
            shapes[f"{p}.self_attn.o_proj.bias"] = (hidden,)
        if config.qk_norm:
            shapes[f"{p}.self_attn.q_norm.weight"] = (head_dim,)
            shapes[f"{p}.self_attn.k_norm.weight"] = (head_dim,)
        shapes[f"{p}.mlp.gate_proj.weight"] = (inter, hidden)
        shapes[f"{p}.mlp.up_proj.weight"] = (inter, hidden)
        shapes[f"{p}.mlp.down_proj.weight"] = (hidden, inter)
    return shapes


def build_model(
    config: ModelConfig,
    attention: AttentionBackend,
    state_dict: Mapping[str, Tensor | QuantizedWeight],
    device: torch.device,
    *,
    source: str,
) -> CausalLM:
    """A `CausalLM` whose parameters are the given tensors (this module's
    names, already in the wanted dtype), without a throwaway random init.
    A quantized weight becomes a quantized linear (a quantized tied
    embedding: the LM head, with a dense copy for the token lookup)."""
    dense = {n: w for n, w in state_dict.items() if isinstance(w, Tensor)}
    quantized = {n: w for n, w in state_dict.items() if not isinstance(w, Tensor)}
    with torch.device("meta"):
        model = CausalLM(config, attention)
    for name, weight in quantized.items():
        if name == "embed_tokens.weight":  # tied: the LM head reads it quantized
            dense[name] = as_dense(weight, dense["norm.weight"].dtype)
            name = "lm_head.weight"
        module = name.removesuffix(".weight")
        parent, _, child = module.rpartition(".")
        setattr(model.get_submodule(parent), child, make_quant_linear(weight, dense.pop(f"{module}.bias", None)))
    try:
        model.load_state_dict(dense, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelLoadError(f"{source}: weights do not fit the model: {exc}") from exc
    model.requires_grad_(False)
    return model.to(device).eval()


def _preview(names: list[str], limit: int = 6) -> str:
    if not names:
        return "none"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
