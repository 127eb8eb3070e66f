"""The agentgate engine: token ids in, token ids out.

`LLM` and `SamplingParams` are the offline API; front ends use
`engine.front.client.EngineClient` and `engine.front.protocol`.
"""

from typing import TYPE_CHECKING

from agentgate.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from agentgate.engine.llm import LLM, RequestOutput

__all__ = ["LLM", "RequestOutput", "SamplingParams"]


def __getattr__(name: str):
    # LLM pulls in torch and the model code; front ends that only need the
    # protocol should not pay for that on import.
    if name in ("LLM", "RequestOutput"):
        from agentgate.engine import llm

        return getattr(llm, name)
    raise AttributeError(name)
