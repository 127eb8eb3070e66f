"""Speculative decoding without a draft model (issue 15).

Drafts come from tokens already seen: the request's own prompt and output
(prompt lookup, `NgramProposer`) and, with `SuffixProposer`, the recent
outputs of every request (the twentieth agent calling ``get_weather`` gets
the call's shape drafted). `DraftLength` sizes each request's drafts from its
recent acceptance. The runner verifies a request's drafts in one forward pass
over its k+1 positions (`verify.accepted_prefix`); the scheduler rolls back
the KV of rejected positions.
"""

from agentgate.engine.speculative.draft_length import DraftLength
from agentgate.engine.speculative.proposers import (
    SPECULATIVE_MODES,
    NgramProposer,
    Proposer,
    SuffixProposer,
    make_proposer,
)

__all__ = ["SPECULATIVE_MODES", "DraftLength", "NgramProposer", "Proposer", "SuffixProposer", "make_proposer"]
