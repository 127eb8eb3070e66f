"""The offline Python API, for scripts and tests (kept stable):

    from agentgate.engine import LLM, SamplingParams
    llm = LLM()                                   # the default model
    [out] = llm.chat([{"role": "user", "content": "Hi"}], SamplingParams(temperature=0))
    print(out.text)

It runs the engine core in this process (no engine process, no sockets).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import COMPILE_POLL_S, EngineCore
from agentgate.engine.errors import EngineError, InvalidRequestError
from agentgate.engine.front.protocol import ThinkingSpec, TokenLogprobs
from agentgate.engine.model_files.model_path import resolve_model_path
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.output_processor import OutputProcessor
from agentgate.engine.text.tokenizer import Tokenizer, load_tokenizer

Prompt = str | list[int]


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    logprobs: list[TokenLogprobs] | None = None
    num_cached_tokens: int = 0
    reasoning_tokens: int = 0  # with a thinking block: its tokens, start and end included


class LLM:
    """A model loaded in this process, generating for batches of prompts.

    ``model``: None for the default model, a .gguf file or an HF directory.
    Other keyword arguments are EngineConfig fields (runner, dtype,
    max_num_seqs, num_kv_blocks, ...).
    """

    def __init__(self, model: str | Path | None = None, **engine_options: Any) -> None:
        self.config = EngineConfig(model=None if model is None else str(model), **engine_options)
        self.core = EngineCore(self.config)
        self.tokenizer: Tokenizer | None = _try_tokenizer(self.config)
        self._ids = itertools.count()

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        thinking: ThinkingSpec | Sequence[ThinkingSpec | None] | None = None,
        lora: str | Sequence[str] = "",
    ) -> list[RequestOutput]:
        """Generate for every prompt (text, or token ids), all batched together; ``thinking``: the
        replies' thinking block (one, or one per prompt), which the engine enforces
        (``engine.structured.thinking``); ``lora``: the LoRA adapter each runs through (one name, or
        one per prompt; "" for the base model; ``engine.lora``)."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        prompt_list = list(prompts)
        param_list = _broadcast(params or SamplingParams(), len(prompt_list))
        blocks = list(thinking) if isinstance(thinking, Sequence) else [thinking] * len(prompt_list)
        if len(blocks) != len(prompt_list):
            raise InvalidRequestError(f"got {len(blocks)} thinking blocks for {len(prompt_list)} prompts", "thinking")
        loras = [lora] * len(prompt_list) if isinstance(lora, str) else list(lora)
        if len(loras) != len(prompt_list):
            raise InvalidRequestError(f"got {len(loras)} LoRA adapters for {len(prompt_list)} prompts", "lora")
        outputs: dict[str, RequestOutput] = {}
        processors: dict[str, OutputProcessor] = {}
        eos = self.tokenizer.eos_token_ids if self.tokenizer else frozenset()
        try:
            for prompt, p, block, adapter in zip(prompt_list, param_list, blocks, loras):
                ids = self._encode(prompt)
                rid = f"llm-{next(self._ids)}"
                self.core.add_request(rid, ids, p, eos, thinking=block, lora=adapter)
                outputs[rid] = RequestOutput(rid, ids)
                if self.tokenizer is not None:
                    processors[rid] = OutputProcessor(self.tokenizer, p)
            self._run(outputs, processors)
        except BaseException:
            unfinished = [rid for rid, out in outputs.items() if out.finish_reason is None]
            self.core.abort_requests(unfinished)
            raise
        return list(outputs.values())

    def chat(
        self,
        messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[RequestOutput]:
        """Render one conversation (or a list of them) with the model's chat
        template and generate a reply for each."""
        tokenizer = self._require_tokenizer()
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [
            tokenizer.apply_chat_template(conv, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True)
            for conv in conversations
        ]
        return self.generate(prompts, params)

    def _run(self, outputs: dict[str, RequestOutput], processors: dict[str, OutputProcessor]) -> None:
        remaining = len(outputs)
        while remaining:
            if self.core.only_compiling:
                time.sleep(COMPILE_POLL_S)  # let the grammar thread run
            for out in self.core.step():
                if out.error is not None:
                    raise InvalidRequestError(out.error, "structured") if out.invalid else EngineError(out.error)
                result = outputs[out.request_id]
                result.token_ids += out.new_token_ids
                result.num_cached_tokens = out.num_cached_tokens
                if out.logprobs:
                    result.logprobs = (result.logprobs or []) + out.logprobs
                finished = out.finish_reason is not None
                processor = processors.get(out.request_id)
                if processor is not None and not processor.stopped:
                    delta = processor.push(out.new_token_ids, finished)
                    result.text += delta.text
                    if delta.stopped and not finished:
                        self.core.abort_requests([out.request_id])
                        out.finish_reason, finished = "stop", True
                if finished and result.finish_reason is None:
                    result.reasoning_tokens = out.reasoning_tokens
                    result.finish_reason = "stop" if processor and processor.stopped else out.finish_reason
                    remaining -= 1

    def _encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return self._require_tokenizer().encode(prompt)
        return list(prompt)

    def _require_tokenizer(self) -> Tokenizer:
        if self.tokenizer is None:
            raise InvalidRequestError("this model has no tokenizer; pass prompts as token ids", "prompt")
        return self.tokenizer


def _broadcast(params: SamplingParams | Sequence[SamplingParams], n: int) -> list[SamplingParams]:
    if isinstance(params, SamplingParams):
        return [params] * n
    if len(params) != n:
        raise InvalidRequestError(f"got {len(params)} sampling params for {n} prompts", "params")
    return list(params)


def _try_tokenizer(config: EngineConfig) -> Tokenizer | None:
    """The model's tokenizer; None for dummy weights shipped without one."""
    path = resolve_model_path(config.model)
    try:
        return load_tokenizer(path)
    except Exception:
        if config.load_format == "dummy":
            return None
        raise
