"""A GGUF file's tokenizer (``tokenizer.ggml.*`` metadata) as the HF ``tokenizers`` pipeline it
stands for: the BPE model, the pre-tokenizer its ``pre`` name means, added tokens, BOS/EOS
post-processing, the end markers and chat templates (`engine.text.tokenizer` wraps it)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.model_files.gguf_file import read_gguf


class GgufVocabulary(NamedTuple):
    backend: tokenizers.Tokenizer
    special_tokens: dict[str, str]  # bos_token, eos_token, ... as HF names them
    extra_eos_ids: frozenset[int]  # end-of-turn and end-of-message ids besides EOS
    chat_templates: dict[str, str]  # by name, "default" first


# GGUF metadata names of the special token ids: tokenizer.ggml.<name>_token_id.
_GGUF_SPECIAL_KEYS = {"bos": "bos", "eos": "eos", "unk": "unknown", "pad": "padding"}
# GGUF token types (llama.cpp's llama_token_type).
_CONTROL, _USER_DEFINED = 3, 4

# Pre-tokenizer regexes of the HF originals, by the name llama.cpp's converter writes to tokenizer.ggml.pre.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gguf_pipeline(pre: str) -> tuple[normalizers.Normalizer | None, pre_tokenizers.PreTokenizer, bool]:
    """(normalizer, pre-tokenizer, BPE ignore_merges) of the HF tokenizer that a GGUF ``pre`` name stands for."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("gpt2", "gpt-2", "default"):
        return None, byte_level, False
    if pre == "smollm":
        return None, pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level]), False
    if pre in ("llama-bpe", "llama3", "qwen2"):
        split = pre_tokenizers.Split(Regex(_QWEN2_SPLIT if pre == "qwen2" else _LLAMA3_SPLIT), "isolated")
        sequence = pre_tokenizers.Sequence([split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        return (normalizers.NFC() if pre == "qwen2" else None), sequence, pre != "qwen2"
    raise ModelLoadError(
        f"GGUF pre-tokenizer {pre!r} is not supported (supported: smollm, gpt2/default, llama-bpe, qwen2); "
        "serve the model's HF directory instead"
    )


def read_gguf_vocabulary(file: Path) -> GgufVocabulary:
    """The tokenizer a GGUF file's metadata describes (only byte-level BPE, ``tokenizer.ggml.model``
    ``gpt2``); `ModelLoadError` when it has none or another kind."""
    meta = read_gguf(file).metadata
    if "tokenizer.ggml.tokens" not in meta:
        raise ModelLoadError(f"{file} has no tokenizer metadata (tokenizer.ggml.tokens)")
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(f"{file}: GGUF tokenizer model {kind!r} is not supported (only 'gpt2' byte-level BPE)")
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    normalizer, pre_tokenizer, ignore_merges = _gguf_pipeline(meta.get("tokenizer.ggml.pre", "default"))

    backend = tokenizers.Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore_merges))
    if normalizer is not None:
        backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    # CONTROL tokens are HF's special added tokens; USER_DEFINED are the non-special added ones
    # (the converter writes e.g. Qwen's <tool_call> so), which decode keeps even when skipping specials.
    added = [(tokens[i], t == _CONTROL) for i, t in enumerate(types) if t in (_CONTROL, _USER_DEFINED)]
    backend.add_tokens([AddedToken(content, special=special, normalized=False) for content, special in added])

    def token(key: str) -> str | None:
        i = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[i] if isinstance(i, int) and 0 <= i < len(tokens) else None

    special = {f"{k}_token": t for k, key in _GGUF_SPECIAL_KEYS.items() if (t := token(key))}
    bos = special.get("bos_token") if meta.get("tokenizer.ggml.add_bos_token") else None
    eos = special.get("eos_token") if meta.get("tokenizer.ggml.add_eos_token") else None
    if bos or eos:
        backend.post_processor = _bos_eos_processor(backend, bos, eos)
    extra_eos = {i for k in ("eot", "eom") if isinstance(i := meta.get(f"tokenizer.ggml.{k}_token_id"), int)}
    templates = {"default": meta["tokenizer.chat_template"]} if "tokenizer.chat_template" in meta else {}
    prefix = "tokenizer.chat_template."
    templates |= {k[len(prefix) :]: v for k, v in meta.items() if k.startswith(prefix) and isinstance(v, str)}
    return GgufVocabulary(backend, special, frozenset(extra_eos), templates)


def _bos_eos_processor(backend: tokenizers.Tokenizer, bos: str | None, eos: str | None) -> processors.PostProcessor:
    """The post-processor that adds BOS and/or EOS around a single sequence."""
    single = " ".join([*([f"{bos}:0"] if bos else []), "$A:0", *([f"{eos}:0"] if eos else [])])
    ids = {t: backend.token_to_id(t) for t in (bos, eos) if t}
    return processors.TemplateProcessing(single=single, special_tokens=list(ids.items()))
