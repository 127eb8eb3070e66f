"""The walk of one request through the gateway, as ``sys.setprofile`` sees it, and the
calls in it that do not go one way.

:class:`Walk` wraps the ASGI app. While a request it lets through runs, every call into a
module of this repository made by that request (its task and the tasks it starts: the
context carries a marker, so the engine client's dispatch task, the background writer and
the heartbeats, which serve every request, are not counted) is a :class:`Hop` when it
changes module. A coroutine or generator resumed is not a new call: its first call was.

:func:`judge` reads the hops. The words it uses:

- **the walk**: the modules in the order the request first calls into them; a module's
  *first caller* is the module that made that first call, and the *path* that reached a
  module is its first caller, that one's first caller, and so on;
- **the HTTP edge**: ``gateway/http/`` (before issue 37, the modules that imported
  Starlette or sse-starlette): the server calls it, and it calls the spine; calls between
  two edge modules are ASGI's own plumbing (a middleware's ``receive`` and ``send``
  wrappers) and are not judged;
- **side files**: modules that call no other module of the repository on this walk (types,
  encoders, counters, checks); every module may call them, they are not judged;
- **running**: a module with a frame that started and has not finished (a coroutine
  suspended while it awaits is still running);
- an object's methods calling each other are one object at work, not a hop to judge,
  whichever modules its classes are defined in (a tool parser's base class and its
  format's subclass).

A call into a module already walked is judged. It is a **callback up** when the module
called has a frame on the caller's stack (it is waiting on the caller), or when a spine
module calls into the edge (the spine never calls HTTP). Otherwise it goes down, or one
way, when any of these holds:

1. the caller made the same call before (a loop: a reader fed every token);
2. the caller is on the path that reached the module (it reached it through others);
3. a spine module on the caller's own path called the module before (the generation
   reads the engine stream that dispatch, which made the generation, opened);
4. the module's first caller, or a spine module on its path, is still running (what
   the middleware opened, for every request it still wraps);
5. the caller is on the edge and the module's first caller is too (the HTTP layer reads
   what its route built).

Else it is a **return into a module left**: the module was reached another way, and
everything that led there has returned.
"""

from __future__ import annotations

import contextvars
import dis
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("gateway", "engine")
_WALKING: contextvars.ContextVar[bool] = contextvars.ContextVar("walking", default=False)
_YIELD = dis.opmap["YIELD_VALUE"]


@dataclass(frozen=True, slots=True)
class Hop:
    caller: str | None  # the module of the nearest caller frame of this repository (None: the framework's)
    callee: str
    function: str
    stack: tuple[str, ...]  # the modules with a frame on the caller's stack, outermost first
    running: frozenset[str]  # the modules with a frame started and not finished (suspended included)
    same_object: bool = False  # a method calling another of its own object's, defined in another module


class Walk:
    """An ASGI app that records the hops of the requests it serves (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.hops: list[Hop] = []
        self._modules: dict[str, str | None] = {}
        self._first_resume: dict[CodeType, int] = {}
        self._live: dict[int, tuple[str, FrameType]] = {}  # id(frame) -> its module and the frame (kept alive)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = _WALKING.set(True)
        previous = sys.getprofile()
        sys.setprofile(self._profile)
        try:
            await self.app(scope, receive, send)
        finally:
            sys.setprofile(previous)
            _WALKING.reset(token)
            self._live.clear()

    def _module(self, filename: str) -> str | None:
        module = self._modules.get(filename, "")
        if module == "":
            path = Path(filename)
            inside = path.is_relative_to(ROOT) and path.relative_to(ROOT).parts[0] in TOPS
            module = self._modules[filename] = str(path.relative_to(ROOT)) if inside else None
        return module

    def _fresh(self, frame: FrameType) -> bool:
        """Whether ``frame`` starts now (not a generator or coroutine resumed)."""
        code = frame.f_code
        start = self._first_resume.get(code)
        if start is None:
            start = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
            self._first_resume[code] = start
        return frame.f_lasti <= start

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "return") or not _WALKING.get():
            return
        module = self._module(frame.f_code.co_filename)
        if module is None:
            return
        if event == "return":
            if frame.f_code.co_code[frame.f_lasti] != _YIELD:  # finished (not suspended at a yield or await)
                self._live.pop(id(frame), None)
            return
        if not self._fresh(frame):
            return
        stack: list[str] = []
        outer = frame.f_back
        same_object = _self(frame) is not None and outer is not None and _self(frame) is _self(outer)
        while outer is not None:
            name = self._module(outer.f_code.co_filename)
            if name is not None and (not stack or stack[-1] != name):
                stack.append(name)
            outer = outer.f_back
        stack.reverse()
        caller = stack[-1] if stack else None
        if caller != module:
            running = frozenset(name for name, _ in self._live.values())
            self.hops.append(Hop(caller, module, frame.f_code.co_qualname, tuple(stack), running, same_object))
        self._live[id(frame)] = (module, frame)


def _self(frame: FrameType) -> object | None:
    """The object a method runs on (None: not a method)."""
    code = frame.f_code
    return frame.f_locals.get("self") if code.co_argcount and code.co_varnames[0] == "self" else None


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # "return into a module left" or "callback up"
    caller: str
    callee: str
    function: str


@dataclass(frozen=True, slots=True)
class Judgement:
    walk: list[str]  # every module, in the order the request first called into it
    first_caller: dict[str, str | None]
    side: set[str]
    verdicts: list[Verdict]  # each (caller, callee) judged wrong once, in the order met

    def count(self, kind: str) -> int:
        return sum(v.kind == kind for v in self.verdicts)


RETURN = "return into a module left"
CALLBACK = "callback up"


def judge(hops: list[Hop], edge: Callable[[str], bool]) -> Judgement:
    """The walk of ``hops`` and the calls in it that do not go one way (see the module docstring);
    ``edge(module)``: whether a module is on the HTTP edge."""
    callers = {h.caller for h in hops if h.caller is not None}
    side = {h.callee for h in hops} - callers
    first: dict[str, str | None] = {}
    called: dict[str, set[str]] = {}  # module -> the modules it has called
    verdicts: list[Verdict] = []
    judged: set[tuple[str, str]] = set()

    def path(module: str) -> list[str]:
        out, seen = [], {module}
        parent = first.get(module)
        while parent is not None and parent not in seen:
            out.append(parent)
            seen.add(parent)
            parent = first.get(parent)
        return out

    for hop in hops:
        a, b = hop.caller, hop.callee
        if b not in first:
            first[b] = a
        elif (
            a is not None
            and b not in side
            and not (edge(a) and edge(b))
            and not hop.same_object
            and (a, b) not in judged
        ):
            kind = _kind(hop, first, called, path, edge)
            if kind is not None:
                judged.add((a, b))
                verdicts.append(Verdict(kind, a, b, hop.function))
        if a is not None:
            called.setdefault(a, set()).add(b)
    return Judgement(list(first), first, side, verdicts)


def _kind(hop: Hop, first: dict[str, str | None], called: dict[str, set[str]], path, edge) -> str | None:
    a, b = hop.caller, hop.callee
    if b in hop.stack or (edge(b) and not edge(a)):
        return CALLBACK
    b_path = path(b)
    spine_path = [m for m in path(a) if not edge(m)]
    one_way = (
        b in called.get(a, ())
        or a in b_path
        or any(b in called.get(m, ()) for m in spine_path)
        or first[b] in hop.running
        or any(m in hop.running for m in b_path if not edge(m))
        or (edge(a) and first[b] is not None and edge(first[b]))
    )
    return None if one_way else RETURN


def is_edge(module: str) -> bool:
    """Whether ``module`` is on the HTTP edge: under ``gateway/http/``, or a gateway module that
    imports Starlette, sse-starlette or uvicorn (the edge before it had a folder of its own)."""
    if module.startswith("gateway/http/"):
        return True
    return module.startswith("gateway/") and _HTTP_IMPORT.search((ROOT / module).read_text()) is not None


_HTTP_IMPORT = re.compile(r"^\s*(?:from|import) (?:starlette|sse_starlette|uvicorn)\b", re.M)
