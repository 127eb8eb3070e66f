"""Whether a registered engine serves what its gateway serves (``gateway.engines.discovery``).

A gateway tokenizes, applies the chat template and detokenizes with its own ``--model``; an engine
of another model, or of the same name with another tokenizer, answers its token ids with garbage.
So an engine's record (``gateway.engines.registry``) carries its model's identity, and a gateway
routes only to engines whose identity matches:

- the model's name and the tokenizer's vocabulary digest (``Tokenizer.vocab_digest``) must be the
  gateway's own;
- the context length, dtype and quantization must be those of the first engine the gateway took
  (its admission bounds and ``/v1/models`` come from that one: every engine must keep them).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentgate.gateway.engines.registry import EngineRecord


@dataclass(frozen=True)
class GatewayModel:
    """What the gateway serves: its model's name and its tokenizer's vocabulary digest."""

    name: str
    vocab_digest: str


def mismatch(record: EngineRecord, ours: GatewayModel, first: EngineRecord | None) -> str | None:
    """Why the engine of ``record`` must not serve this gateway (None: it may). ``first``: the
    record of the first engine taken, whose shape every later one must have."""
    if not record.vocab_digest:
        return "its record carries no model identity (an engine of an older agentgate, or its tokenizer unreadable)"
    if record.model != ours.name:
        return f"it serves model {record.model!r}, this gateway {ours.name!r}"
    if record.vocab_digest != ours.vocab_digest:
        return (
            f"its tokenizer's vocabulary (digest {record.vocab_digest}) is not this gateway's "
            f"({ours.vocab_digest}): the same model name with other files"
        )
    if first is not None:
        for field in ("max_model_len", "dtype", "quantization"):
            theirs, wanted = getattr(record, field), getattr(first, field)
            if theirs != wanted:
                return f"its {field} is {theirs!r}, that of the engines serving here {wanted!r} (at {first.address})"
    return None
