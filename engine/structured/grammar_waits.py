"""The requests an engine holds while their grammars compile, each until a deadline.

A constrained request is scheduled once its grammar has compiled
(``engine.structured.structured_output.GrammarCompiler``, on threads fair per tenant). The wait is
bounded: a request whose grammar is not ready ``timeout`` seconds (``--grammar-compile-timeout``)
after it arrived, on the engine's own clock, fails as invalid, which the front end answers with a
400 on the field its schema came from (``tools``, ``response_format``). Its compile cannot be
stopped once it runs; it ends on its own, counted against its tenant's share of the workers, and
its grammar is cached for whoever asks again. A compile that never started is cancelled.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from agentgate.engine.errors import InvalidRequestError
from agentgate.engine.front.protocol import EngineCoreOutput
from agentgate.engine.request import Request


class GrammarWaits:
    """Requests waiting for their grammar (see the module docstring)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._waiting: list[tuple[Request, Future[Any], float]] = []  # with the time.monotonic() it is late at

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def __contains__(self, request_id: str) -> bool:
        return any(request.request_id == request_id for request, _, _ in self._waiting)

    def add(self, request: Request, compile_: Future[Any]) -> None:
        """``request`` waits for ``compile_`` (a ``GrammarCompiler.submit``), at most ``timeout`` s from now."""
        self._waiting.append((request, compile_, time.monotonic() + self.timeout))

    def take_ready(self) -> tuple[list[Request], list[EngineCoreOutput]]:
        """The requests whose grammar is ready (attached, to schedule), and the final outputs of
        those whose compile failed or is late."""
        from agentgate.engine.structured.structured_output import RequestGrammar

        ready, failed, waiting = [], [], []
        now = time.monotonic()
        for request, future, deadline in self._waiting:
            if not future.done():
                if now <= deadline:
                    waiting.append((request, future, deadline))
                    continue
                future.cancel()
                failed.append(EngineCoreOutput(request.request_id, [], "error", error=self.late, invalid=True))
            elif (error := future.exception()) is not None:
                invalid = isinstance(error, InvalidRequestError)
                failed.append(EngineCoreOutput(request.request_id, [], "error", error=str(error), invalid=invalid))
            else:
                grammar = RequestGrammar(future.result())
                if request.grammar is None:
                    request.grammar = grammar
                else:  # its thinking gate: the grammar starts after the thinking
                    request.grammar.attach(grammar)
                ready.append(request)
        self._waiting = waiting
        return ready, failed

    def remove(self, request_ids: list[str] | None) -> list[Request]:
        """Stop waiting for the named requests (every one for None), their compiles cancelled where
        not started; the requests removed."""
        removed, kept = [], []
        for entry in self._waiting:
            if request_ids is None or entry[0].request_id in request_ids:
                entry[1].cancel()
                removed.append(entry[0])
            else:
                kept.append(entry)
        self._waiting = kept
        return removed

    @property
    def late(self) -> str:
        """The error of a request whose grammar missed its deadline."""
        return (
            f"invalid schema: its grammar did not compile within {self.timeout:g} s (--grammar-compile-timeout); "
            "a simpler schema (fewer or smaller repetition bounds, patterns and properties) compiles in time"
        )
