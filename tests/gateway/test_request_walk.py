"""The walk of one request goes one way (issue 37): a streaming chat completion with a
forced tool call, the returning turn of a session's agent program, traced under
``sys.setprofile`` (``tests.support.request_walk``). No call goes back up into a module
waiting on its caller, and none goes into a module the request had already left, but the
one the design documents: the SSE response reading the generation the route owns."""

from __future__ import annotations

from tests.support.request_walk import DOCUMENTED, traced, undocumented
from tests.support.walk import CALLBACK, RETURN, Hop, judge


def test_the_request_walks_one_way_but_for_the_one_documented_return():
    _, judgement = traced()
    assert undocumented(judgement) == [], "\n".join(map(str, undocumented(judgement)))
    assert [(v.kind, v.caller, v.callee) for v in judgement.verdicts] == [DOCUMENTED]
    walked = set(judgement.walk)
    spine = ("gateway/chat.py", "gateway/dispatch.py", "engine/front/client.py", "gateway/programs/turn_tokens.py")
    for module in ("gateway/http/routes/openai.py", *spine, "gateway/state/sessions.py", "gateway/formats/openai.py"):
        assert module in walked, f"the walk missed {module}: the traced request is not the one the doc walks"


def test_the_engine_has_the_request_before_the_route_returns():
    hops, _ = traced()
    route_returned = next(i for i, h in enumerate(hops) if h.callee == "gateway/http/sse.py")
    submitted = next(i for i, h in enumerate(hops) if h.function == "EngineClient.add")
    assert submitted < route_returned


def _hop(caller: str | None, callee: str, stack: tuple[str, ...] = ()) -> Hop:
    """A call from ``caller`` (None: the server) with ``stack`` on the stack, nothing else running."""
    return Hop(caller, callee, "f", stack, frozenset(stack))


def test_the_judge_sees_a_return_into_a_module_left_and_a_callback_up():
    """The rules themselves, on a made-up walk: ``a`` reaches ``b``, ``b`` reaches ``d``, ``a``
    reaches ``c``; ``a`` calling ``b`` again is a loop; ``c`` calling ``d`` from a task of its
    own, once everything that led to ``d`` returned, is a return into a module left; ``d``
    calling ``a`` while ``a`` waits on it is a callback up."""
    a, b, c, d = (f"gateway/{name}.py" for name in "abcd")
    hops = [
        _hop(None, a),
        _hop(a, b, (a,)),
        _hop(b, d, (a, b)),
        _hop(d, "gateway/leaf.py", (a, b, d)),
        _hop(a, c, (a,)),
        _hop(a, b, (a,)),
        _hop(None, c),
        _hop(c, d, (c,)),
        _hop(d, a, (a, b, d)),
    ]
    judgement = judge(hops, lambda module: module.startswith("gateway/http/"))
    assert [(v.kind, v.caller, v.callee) for v in judgement.verdicts] == [(RETURN, c, d), (CALLBACK, d, a)]
    assert judgement.side == {"gateway/leaf.py"}
