"""Small agents that run against the default model (SmolLM2-135M-Instruct) on a local server.

    agentgate serve &
    python -m agentgate.agents.examples.calculator "What is 12 * 7 + 3?"
    python -m agentgate.agents.examples.file_search "Which file defines the Agent class?" --root agents

Both make the first turn call a tool (``tool_choice="required"``, enforced by
the server's constrained decoding), then let the model answer. A 135M model
picks tools and arguments poorly; the point is the loop, which works the same
with a bigger model (``agentgate serve --model ...``).
"""
