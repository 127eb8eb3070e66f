"""Constrained decoding with xgrammar: grammars compiled off the step loop,
one matcher per request, and the token bitmask the sampler applies.

Grammars compile on a thread pool (xgrammar releases the GIL), so a request
waits for its grammar without stalling the engine loop; compiled grammars
are cached by their spec. A request's matcher accepts each token as the step
that sampled it resolves.
"""

from __future__ import annotations

import json
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

import torch
import xgrammar as xgr

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.sampling_params import StructuredOutput


class GrammarCompiler:
    """Compiles StructuredOutput specs for one tokenizer/vocabulary."""

    def __init__(self, tokenizer_path: Path, vocab_size: int, max_threads: int = 2) -> None:
        self.tokenizer_path = tokenizer_path
        self.vocab_size = vocab_size
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar")
        self._max_threads = max_threads
        self._cache: dict[tuple[str, str], Future[xgr.CompiledGrammar]] = {}

    @cached_property
    def _compiler(self) -> xgr.GrammarCompiler:
        from agentgate.engine.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(self.tokenizer_path)
        vocab_type = {
            "byte_level": xgr.VocabType.BYTE_LEVEL,
            "byte_fallback": xgr.VocabType.BYTE_FALLBACK,
        }.get(tokenizer.vocab_type, xgr.VocabType.RAW)
        info = xgr.TokenizerInfo(
            tokenizer.encoded_vocab,
            vocab_type,
            vocab_size=self.vocab_size,
            stop_token_ids=sorted(tokenizer.eos_token_ids),
            add_prefix_space=tokenizer.add_prefix_space,
        )
        return xgr.GrammarCompiler(info, max_threads=self._max_threads)

    def submit(self, spec: StructuredOutput) -> Future[xgr.CompiledGrammar]:
        key = spec.kind()
        future = self._cache.get(key)
        if future is None or (future.done() and future.exception() is not None):
            future = self._cache[key] = self._pool.submit(self._compile, *key)
        return future

    def _compile(self, kind: str, spec: str) -> xgr.CompiledGrammar:
        compiler = self._compiler
        try:
            if kind == "json_schema":
                return compiler.compile_json_schema(spec, any_whitespace=False)
            if kind == "json_object":  # OpenAI's json_object: an object, not any JSON value
                return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
            if kind == "regex":
                return compiler.compile_regex(spec)
            if kind == "grammar":
                return compiler.compile_grammar(spec)
            return compiler.compile_structural_tag(json.loads(spec))
        except Exception as exc:
            raise InvalidRequestError(f"invalid {kind.replace('_', ' ')}: {exc}", "structured") from exc

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class RequestGrammar:
    """One request's position in its grammar."""

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)

    def accept(self, token: int) -> bool:
        """Advance past a sampled token; False if the grammar forbids it."""
        if self.matcher.is_terminated():
            return True  # the grammar is done; the request ends on this token
        return self.matcher.accept_token(token)

    def fill(self, bitmask: torch.Tensor, row: int, drafts: tuple[int, ...] = ()) -> None:
        """Fill ``bitmask[row]`` with the tokens allowed next and, for each
        draft the grammar admits, the following row with those allowed after
        it (the matcher is rolled back after). Rows past a draft the grammar
        forbids stay as they are: that draft cannot match the target's
        token, so nothing after it is accepted."""
        self._fill_one(bitmask, row)
        advanced = 0
        for offset, token in enumerate(drafts, 1):
            if self.matcher.is_terminated() or not self.matcher.accept_token(token):
                break
            advanced += 1
            self._fill_one(bitmask, row + offset)
        if advanced:
            self.matcher.rollback(advanced)

    def forced_tokens(self, limit: int) -> list[int]:
        """Jump-forward: up to ``limit`` tokens spelling the continuation the
        grammar forces from here (none when it admits more than one). They
        are drafts, verified like any other: the output stays what decoding
        token by token gives, whatever tokenization of the forced text the
        model itself prefers."""
        if limit <= 0 or self.matcher.is_terminated():
            return []
        return self.matcher.find_jump_forward_tokens()[:limit]

    def _fill_one(self, bitmask: torch.Tensor, row: int) -> None:
        if self.matcher.is_terminated():
            bitmask[row].fill_(-1)
        else:
            self.matcher.fill_next_token_bitmask(bitmask, row)


def new_bitmask(num_rows: int, vocab_size: int, pinned: bool) -> torch.Tensor:
    """An all-allowed bitmask (every bit set) for ``num_rows`` rows."""
    words = (vocab_size + 31) // 32
    return torch.full((num_rows, words), -1, dtype=torch.int32, pin_memory=pinned)
