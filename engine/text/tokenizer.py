"""The served model's tokenizer, loaded from an HF directory or a GGUF file.

Both sources end up as one ``tokenizers.Tokenizer`` (the Rust backend) wrapped
in :class:`Tokenizer`, which adds what serving needs on top: the end markers,
the chat templates, each token's bytes (for the incremental detokenizer) and
the vocabulary in the shape a grammar library (xgrammar) builds its tokenizer
info from. Behaviour follows the HF original, not llama.cpp, wherever the two
differ (e.g. no BOS unless the tokenizer's post-processor adds one).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import tokenizers
from tokenizers import (
    AddedToken,
)

from agentgate.engine.errors import InvalidRequestError, ModelLoadError
from agentgate.engine.text.chat_template import render_chat
from agentgate.engine.text.gguf_tokenizer import read_gguf_vocabulary

VocabType = Literal["byte_level", "byte_fallback", "raw"]

# Special tokens that end a turn or a document in the model families we serve.
# A model's own EOS is always an end marker; these are the others that, when
# present as special tokens, also end generation (the rule llama.cpp applies
# to pick its end-of-generation tokens).
_END_MARKERS = frozenset(
    {
        "<|endoftext|>",
        "<|im_end|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|end_of_text|>",
        "<|end|>",
        "<|return|>",
        "<end_of_turn>",
        "<EOT>",
        "<｜end▁of▁sentence｜>",
    }
)

_SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _byte_level_table() -> dict[int, str]:
    """``str.translate`` table undoing GPT-2's byte-level alphabet: stand-in char -> the byte it stands for
    (as a latin-1 char). Latin-1 chars outside the alphabet map to U+FFFF, which no byte stands for."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: "\uffff" for b in range(256)}
    table.update({b: chr(b) for b in printable})
    others = (b for b in range(256) if b not in printable)
    table.update({256 + n: chr(b) for n, b in enumerate(others)})
    return table


_BYTE_LEVEL_TABLE = _byte_level_table()


def _token_bytes(token: str, vocab_type: VocabType) -> bytes:
    """The bytes a token stands for, exactly as the backend's decoder sees it.

    Byte-level: every char maps back to one byte; a token with a char outside
    the alphabet (an added token such as ``"<a b>"``) is its raw UTF-8, which
    is what the ByteLevel decoder does. Byte-fallback: ``<0xAB>`` is one byte
    and ``▁`` a space.
    """
    if vocab_type == "byte_level":
        try:
            return token.translate(_BYTE_LEVEL_TABLE).encode("latin-1")
        except UnicodeEncodeError:
            return token.encode()
    if vocab_type == "byte_fallback":
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            return bytes([int(token[3:5], 16)])
        return token.replace("▁", " ").encode()
    return token.encode()


class Tokenizer:
    """A loaded tokenizer. Build it with :func:`load_tokenizer`.

    ``vocab_size`` is the tokenizer's (highest id + 1); a model's logits may be
    wider (padded embeddings), and ids past the vocabulary decode to nothing.
    ``token_bytes[i]`` is the bytes token ``i`` decodes to (what the
    incremental detokenizer works on). ``decode`` is the backend's: it never
    applies transformers' ``clean_up_tokenization_spaces``, which streamed
    output could not apply either.

    ``special_tokens_map`` holds the named special tokens that are set
    (``bos_token``, ``eos_token``, ``unk_token``, ``pad_token``), as
    transformers' attribute of that name; chat templates see them.

    ``eos_token_ids`` is every id that ends generation: the primary
    ``eos_token_id`` (the named ``eos_token``, else the lowest declared EOS
    id), the ids the model config declares as EOS
    (``generation_config.json`` / ``config.json``, or the GGUF EOT/EOM ids),
    and every *special* token whose text is a well-known end-of-turn or
    end-of-text marker (``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>``, …,
    see ``_END_MARKERS``). For SmolLM2 that is {2 ``<|im_end|>``, 0
    ``<|endoftext|>``}: a chat model that drifts into document mode ends with
    ``<|endoftext|>`` and must stop there too.

    Grammar libraries build their tokenizer info from ``encoded_vocab`` (the
    backend's token strings in id order, "" for unused ids), ``vocab_type``,
    ``add_prefix_space`` and ``eos_token_ids``.
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        vocab_type: VocabType,
        special_tokens: dict[str, str],
        extra_eos_ids: frozenset[int] = frozenset(),
        chat_templates: dict[str, str] | None = None,
    ) -> None:
        self.backend = backend
        self.vocab_type: VocabType = vocab_type
        self.chat_templates: dict[str, str] = dict(chat_templates or {})
        self.special_tokens_map: dict[str, str] = {k: v for k, v in special_tokens.items() if v}
        added = backend.get_added_tokens_decoder()
        self.special_token_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)

        vocab = backend.get_vocab(with_added_tokens=True)
        self.vocab_size: int = max(vocab.values()) + 1
        encoded = [""] * self.vocab_size
        for token, i in vocab.items():
            encoded[i] = token
        self.encoded_vocab: list[str] = encoded
        self.token_bytes: list[bytes] = [_token_bytes(t, vocab_type) for t in encoded]
        # No token spans more bytes than this: a text of more bytes (characters) than
        # max_token_bytes x N cannot fit in N tokens, whatever it holds.
        self.max_token_bytes: int = max(map(len, self.token_bytes), default=1)

        first = backend.encode("a", add_special_tokens=False).tokens
        self.add_prefix_space: bool = bool(first) and first[0][0] in ("▁", "Ġ")

        self.bos_token_id: int | None = self._special_id("bos_token")
        eos = self._special_id("eos_token")
        if eos is None:
            eos = min(extra_eos_ids, default=None)
        if eos is None:
            raise ModelLoadError("the tokenizer defines no EOS token (tokenizer config, model config or GGUF metadata)")
        self.eos_token_id: int = eos
        markers = {i for i in self.special_token_ids if added[i].content in _END_MARKERS}
        self.eos_token_ids: frozenset[int] = frozenset({eos, *extra_eos_ids, *markers})

    @cached_property
    def vocab_digest(self) -> str:
        """A short SHA-256 of the vocabulary (every token's string, in id order) and its EOS ids: two
        processes agree on it when ids mean the same text in both (a gateway and its engines)."""
        text = json.dumps([self.encoded_vocab, sorted(self.eos_token_ids)], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _special_id(self, key: str) -> int | None:
        token = self.special_tokens_map.get(key)
        return None if token is None else self.backend.token_to_id(token)

    @property
    def chat_template(self) -> str | None:
        """The default chat template, or None when the model has none."""
        return self.chat_templates.get("default")

    def get_chat_template(self, tools: list[dict] | None = None) -> str:
        """The template HF would pick: ``tool_use`` when tools are given and it exists, else the default."""
        if tools is not None and "tool_use" in self.chat_templates:
            return self.chat_templates["tool_use"]
        if self.chat_template is None:
            raise InvalidRequestError(
                "this model has no chat template; send a raw prompt to /v1/completions instead", param="messages"
            )
        return self.chat_template

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``. Special tokens written in the text are always matched as such (as in HF);
        ``add_special_tokens`` only controls what the post-processor adds (a BOS, for tokenizers that add one)."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str | None:
        return self.backend.id_to_token(i)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def apply_chat_template(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        tokenize: bool = False,
        **kwargs: Any,
    ) -> str | list[int]:
        """Render ``messages`` with the model's template as HF does; token ids when ``tokenize``.

        The special tokens (``bos_token``, ``eos_token``, …) are template variables; ``kwargs`` override
        them and reach the template too. Tokenizing adds no special tokens: the template writes them.
        """
        text = render_chat(
            self.get_chat_template(tools),
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            **{**self.special_tokens_map, **kwargs},
        )
        return self.encode(text, add_special_tokens=False) if tokenize else text


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load the tokenizer of an HF model directory or of a ``.gguf`` file."""
    p = Path(path)
    if p.is_dir():
        return _load_hf_dir(p)
    if p.is_file() and p.suffix == ".gguf":
        return _load_gguf(p)
    if not p.exists():
        raise ModelLoadError(f"no tokenizer at {p}: the path does not exist")
    raise ModelLoadError(f"no tokenizer at {p}: expected an HF model directory or a .gguf file")


# --- HF directories ----------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot read {path}: {e}") from e


def _token_content(value: Any) -> str | None:
    """A special token in tokenizer_config.json: a string or a serialized AddedToken."""
    return value.get("content") if isinstance(value, dict) else value


def _eos_ids(value: Any) -> set[int]:
    if isinstance(value, int):
        return {value}
    return {i for i in value if isinstance(i, int)} if isinstance(value, list) else set()


def _hf_chat_templates(directory: Path, config: dict[str, Any]) -> dict[str, str]:
    """Named templates as transformers finds them: template files take priority over tokenizer_config.json."""
    templates: dict[str, str] = {}
    if (directory / "chat_template.jinja").is_file():
        templates["default"] = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    extra = directory / "additional_chat_templates"
    if extra.is_dir():
        for f in sorted(extra.glob("*.jinja")):
            templates[f.stem] = f.read_text(encoding="utf-8")
    if templates:
        return templates
    value = config.get("chat_template")
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, list):
        return {t["name"]: t["template"] for t in value}
    return {}


def _hf_vocab_type(spec: dict[str, Any]) -> VocabType:
    decoder = spec.get("decoder") or {}
    parts = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    if any(d.get("type") == "ByteLevel" for d in parts):
        return "byte_level"
    if spec.get("model", {}).get("byte_fallback"):
        return "byte_fallback"
    return "raw"


def _load_hf_dir(directory: Path) -> Tokenizer:
    """tokenizer.json is authoritative for tokenizing (its post-processor decides BOS, as in transformers 5);
    tokenizer_config.json names the special tokens and holds the chat template; the model's
    generation_config.json / config.json add EOS ids."""
    file = directory / "tokenizer.json"
    if not file.is_file():
        raise ModelLoadError(f"{directory} has no tokenizer.json (only fast tokenizers are supported)")
    try:
        text = file.read_text(encoding="utf-8")
        spec = json.loads(text)
        backend = tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # the backend raises plain Exception on a malformed file
        raise ModelLoadError(f"cannot load {file}: {e}") from e
    config = _read_json(directory / "tokenizer_config.json")
    special = {k: c for k in _SPECIAL_TOKEN_KEYS if (c := _token_content(config.get(k)))}
    extra_special = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if isinstance(extra_special, dict):  # transformers 5 saves named extra tokens
        extra_special = list(extra_special.values())
    # transformers registers the named special tokens as special added tokens even when tokenizer.json does not.
    named = [*special.values(), *(c for t in extra_special if (c := _token_content(t)))]
    backend.add_special_tokens([AddedToken(c, special=True, normalized=False) for c in named])
    extra_eos = _eos_ids(_read_json(directory / "generation_config.json").get("eos_token_id"))
    extra_eos |= _eos_ids(_read_json(directory / "config.json").get("eos_token_id"))
    return Tokenizer(
        backend,
        vocab_type=_hf_vocab_type(spec),
        special_tokens=special,
        extra_eos_ids=frozenset(extra_eos),
        chat_templates=_hf_chat_templates(directory, config),
    )


def _load_gguf(file: Path) -> Tokenizer:
    vocabulary = read_gguf_vocabulary(file)
    return Tokenizer(
        vocabulary.backend,
        vocab_type="byte_level",
        special_tokens=vocabulary.special_tokens,
        extra_eos_ids=vocabulary.extra_eos_ids,
        chat_templates=vocabulary.chat_templates,
    )
