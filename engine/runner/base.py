"""The set-up both torch runners share (`TorchModelRunner`): the model on its device and the
paged KV cache sized from a byte budget or free memory. The interface every runner implements,
the null runner's included, is `engine.runner.interface`."""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from agentgate.engine.config import EngineConfig, parse_lora_modules
from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.kernel_choice.decode_exactness import batch_dependent_decode_linears
from agentgate.engine.kernel_choice.draft_exactness import drafted_rows_verdict
from agentgate.engine.kernel_choice.row_choice import choose_by_rows, release_quantized_weights
from agentgate.engine.kernel_choice.row_choice_cache import MeasurementCache
from agentgate.engine.kernel_choice.row_invariance import NoInvariantMode, make_rows_invariant
from agentgate.engine.loaders.quantization import describe
from agentgate.engine.runner.cuda_graphs import DecodeGraphs
from agentgate.engine.runner.interface import KVCacheSpec, ModelRunner
from agentgate.engine.step_rows import EXACT_DECODE_REQUESTS

log = logging.getLogger("agentgate.engine")

if TYPE_CHECKING:
    from agentgate.engine.loaders import LoadedModel
    from agentgate.engine.lora.adapter import LoraAdapter
    from agentgate.engine.lora.manager import LoraManager

CPU_KV_CACHE_BYTES = 1 << 30
CPU_MAX_MODEL_LEN = 8192
GRAPH_AND_SAMPLER_MARGIN = 256 << 20  # bytes kept for CUDA graphs and the sampler's temporaries


def kv_blocks_from_free_memory(
    free: int, total: int, utilization: float, activation_bytes: int, bytes_per_block: int
) -> int:
    """KV blocks that fit on a device with ``free`` of ``total`` bytes free:
    keep ``(1 - utilization) * total`` free, room for the peak of one full
    step's activations (plus 20%) and a margin for graphs and sampling. The
    result is negative when something else (another engine in this process,
    another process) already holds what this engine may use."""
    budget = free - (1.0 - utilization) * total - 1.2 * activation_bytes - GRAPH_AND_SAMPLER_MARGIN
    return int(budget // bytes_per_block)


class TorchModelRunner(ModelRunner):
    """A runner with a real model and a real paged KV cache."""

    device: torch.device
    dtype: torch.dtype

    @property
    def device_type(self) -> str:
        return self.device.type

    @property
    def device_name(self) -> str:
        return str(self.device)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def __init__(self, config: EngineConfig, loaded: LoadedModel | None = None) -> None:
        from agentgate.engine.loaders import load_model

        self.config = config
        self.device = config.resolved_device()
        if config.deterministic and self.device.type != "cpu":
            raise InvalidRequestError(
                "--deterministic runs on the CPU only (the CUDA kernels' reductions depend on the batch)",
                "deterministic",
            )
        self.loaded = loaded or load_model(
            config.model,
            dtype=config.dtype,
            device=self.device,
            load_format=config.load_format,
            quantization=config.quantization,
        )
        self.model = self.loaded.model
        row_choice = None
        cache_dir = Path(config.cache_dir).expanduser() if config.cache_dir else None
        if self.device.type == "cpu":
            self.model.pack_for_cpu()
            dense_batches = config.batched_matmul == "auto" and not config.deterministic
            dtype = self.model.embed_tokens.weight.dtype
            if dense_batches:
                row_choice = choose_by_rows(self.model, dtype, cache_dir, remeasure=config.remeasure)
            else:
                release_quantized_weights(self.model)
        if config.deterministic:
            try:
                self.model.make_batch_invariant()
                dtype = self.model.embed_tokens.weight.dtype
                remembered = MeasurementCache(cache_dir, remeasure=config.remeasure)
                linears = make_rows_invariant(self.model, dtype, config.max_num_batched_tokens, remembered)
            except NoInvariantMode as exc:
                raise InvalidRequestError(
                    f"--deterministic cannot be honoured on this CPU: {exc}; start without it", "deterministic"
                ) from exc
        if self.device.type == "cpu":
            self._use_native_attention(config, cache_dir)
        if self.device.type == "cpu" and config.resolved_speculative() == "auto":
            self.batch_dependent_decode = tuple(
                batch_dependent_decode_linears(
                    self.model,
                    self.model.embed_tokens.weight.dtype,
                    EXACT_DECODE_REQUESTS * (config.num_speculative_tokens + 1),
                    cache_dir,
                    remeasure=config.remeasure,
                )
            )
            if not self.batch_dependent_decode:
                differs = drafted_rows_verdict(
                    self.model,
                    config.block_size,
                    self.model.embed_tokens.weight.dtype,
                    config.num_speculative_tokens,
                    cache_dir,
                    remeasure=config.remeasure,
                )
                self.batch_dependent_decode = () if differs is None else (differs,)
        self.quantization = self.loaded.quantization
        self.weights, self.weight_bytes_per_step = describe(self.model)
        if row_choice is not None:
            self.weights += f"; {row_choice.describe()}"
        if config.deterministic:
            modes = ", ".join(f"{mode} x {count}" for mode, count in sorted(linears.items()))
            self.weights += f"; deterministic: batch-invariant attention, linears {modes}"
        self.model_config = self.loaded.config
        self.architecture = self.model_config.architecture
        self.dtype = next(self.model.parameters()).dtype
        self.vocab_size = self.model_config.vocab_size
        # Find the batch's shared prefix blocks only for a backend that uses them.
        self.reads_shared_prefix = self.model.attention.reads_shared_prefix
        self.kv_spec = self._plan_kv_cache()
        self.kv_caches = self._allocate_kv_cache(self.kv_spec.num_blocks)
        self.lora = self._start_lora()
        self.max_blocks_per_seq = -(-self.kv_spec.max_model_len // self.kv_spec.block_size)
        # Pure-decode batches replay CUDA graphs, in both runners alike.
        self.graphs: DecodeGraphs | None = None
        if self.device.type == "cuda" and not config.enforce_eager:
            self.graphs = DecodeGraphs(
                self.model,
                self.kv_caches,
                config.max_num_seqs,
                self.max_blocks_per_seq,
                self.kv_spec.max_model_len,
                self.device,
            )
            self.graphs.capture()

    def _use_native_attention(self, config: EngineConfig, cache_dir: Path | None) -> None:
        """RoPE with the cache write, decode rows and the norms through the compiled CPU kernels
        (`engine.attention.cpu_native`, `engine.layers.native_norm`) under ``--cpu-attention auto``,
        where they build and take the model's heads; before the load-time exactness checks, which
        then check them. Under --deterministic every query token takes the decode kernel
        (`BatchInvariantTorchBackend`)."""
        attention = self.model.attention
        if config.cpu_attention != "auto" or not hasattr(attention, "use_native_kernels"):
            return
        from agentgate.engine.attention.cpu_native import NativeAttention, load_native_attention

        shape = self.loaded.config
        why_not = NativeAttention.unsupported(
            next(self.model.parameters()).dtype, shape.num_heads, shape.num_kv_heads, shape.head_dim
        )
        if why_not:
            log.info("decode attention: the torch path (the compiled kernel does not take %s)", why_not)
            return
        native = load_native_attention(cache_dir)
        if native is not None:
            from agentgate.engine.layers.native_norm import NativeRMSNorm
            from agentgate.engine.layers.norm import RMSNorm

            attention.use_native_kernels(native)
            norm = NativeRMSNorm(native.library)
            for module in self.model.modules():
                if isinstance(module, RMSNorm):
                    module.use_native(norm)
            log.info("CPU kernels: compiled attention, RoPE with the KV write, and RMSNorm (%s)", native.path.name)

    def _start_lora(self) -> LoraManager | None:
        """Wrap the linears for LoRA (after every kernel choice, so it wraps the chosen kernels) and
        load ``--lora-modules``; None without LoRA. Steps with adapter rows run eagerly (no CUDA graph)."""
        if not self.config.lora_enabled:
            return None
        from agentgate.engine.lora.manager import LoraManager

        lora = LoraManager(
            self.model,
            self.model_config,
            max_loras=self.config.max_loras,
            max_cpu_loras=self.config.stored_loras,
            max_rank=self.config.max_lora_rank,
            dtype=self.dtype,
            device=self.device,
            row_invariant=self.config.deterministic,
        )
        for name, path in parse_lora_modules(self.config.lora_modules):
            lora.load(name, path)
        return lora

    def lora_rows(self, row_adapters: list[tuple[LoraAdapter | None, int]]) -> AbstractContextManager[bool]:
        """The step's adapters for its forward pass (`LoraManager.rows`); yields whether any row has one."""
        return nullcontext(False) if self.lora is None else self.lora.rows(row_adapters)

    def shutdown(self) -> None:
        self.graphs = None
        self.kv_caches = []

    # -- KV cache ---------------------------------------------------------------
    def _bytes_per_block(self) -> int:
        c = self.model_config
        element = torch.empty((), dtype=self.dtype).element_size()
        return 2 * c.num_layers * self.config.block_size * c.num_kv_heads * c.head_dim * element

    def _plan_kv_cache(self) -> KVCacheSpec:
        cfg = self.config
        if cfg.num_kv_blocks is not None:
            num_blocks = cfg.num_kv_blocks
        elif self.device.type == "cuda":
            activations = self._profile_activation_bytes()
            free, total = torch.cuda.mem_get_info(self.device)
            num_blocks = kv_blocks_from_free_memory(
                free, total, cfg.gpu_memory_utilization, activations, self._bytes_per_block()
            )
            if num_blocks < 2:
                raise RuntimeError(
                    f"KV cache budget allows only {num_blocks} blocks: {free / 2**30:.1f} of "
                    f"{total / 2**30:.1f} GiB are free, and gpu_memory_utilization="
                    f"{cfg.gpu_memory_utilization} leaves the rest of the device to others (memory held "
                    "by another engine in this process counts as taken); set num_kv_blocks, or raise "
                    "gpu_memory_utilization"
                )
        else:
            num_blocks = (cfg.kv_cache_bytes or CPU_KV_CACHE_BYTES) // self._bytes_per_block()
        if num_blocks < 2:
            raise RuntimeError(
                f"KV cache budget allows only {num_blocks} blocks; raise kv_cache_bytes or set num_kv_blocks"
            )
        model_len = self.model_config.max_position_embeddings
        if cfg.max_model_len is not None:
            model_len = min(cfg.max_model_len, model_len)
        elif self.device.type == "cpu":
            model_len = min(model_len, CPU_MAX_MODEL_LEN)
        model_len = min(model_len, num_blocks * cfg.block_size)
        return KVCacheSpec(num_blocks=num_blocks, block_size=cfg.block_size, max_model_len=model_len)

    @torch.inference_mode()
    def _profile_activation_bytes(self) -> int:
        """Peak memory of one full-budget prefill step (forward, logits for
        every sequence slot), measured on a throwaway KV cache."""
        from agentgate.engine.attention import AttentionMetadata

        cfg, dev = self.config, self.device
        num_tokens = min(cfg.max_num_batched_tokens, self.model_config.max_position_embeddings)
        num_blocks = -(-num_tokens // cfg.block_size)
        caches = self._allocate_kv_cache(num_blocks)
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        lens = torch.tensor([num_tokens], dtype=torch.int32)
        qsl = torch.tensor([0, num_tokens], dtype=torch.int32)
        meta = AttentionMetadata(
            slot_mapping=torch.arange(num_tokens, device=dev),
            query_start_loc=qsl.to(dev),
            seq_lens=lens.to(dev),
            block_tables=torch.arange(num_blocks, dtype=torch.int32, device=dev)[None, :],
            max_query_len=num_tokens,
            max_seq_len=num_tokens,
            query_start_loc_cpu=qsl,
            seq_lens_cpu=lens,
        )
        positions = torch.arange(num_tokens, device=dev)
        hidden = self.model(torch.zeros(num_tokens, dtype=torch.long, device=dev), positions, meta, caches)
        rows = torch.arange(min(cfg.max_num_seqs, num_tokens), device=dev)
        self.model.compute_logits(hidden[rows]).softmax(-1)
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) - before
        del caches, hidden
        torch.cuda.empty_cache()
        return peak

    def _allocate_kv_cache(self, num_blocks: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        c = self.model_config
        shape = (2, c.num_layers, num_blocks, self.config.block_size, c.num_kv_heads, c.head_dim)
        cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        return [(cache[0, layer], cache[1, layer]) for layer in range(c.num_layers)]
