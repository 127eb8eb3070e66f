"""A file-search agent: it lists, greps and reads files under one root directory.

    python -m agentgate.agents.examples.file_search "Which file defines the Agent class?" --root agents [--url URL]

The tools never leave ``--root`` (paths are resolved and checked), read at
most a few hundred lines, and skip binary files.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from agentgate.agents import Agent, AsyncClient, Tool
from agentgate.agents.examples._common import Printer, parser

SYSTEM = (
    "You find things in a directory of files. Use the tools to list files, search their text and read them. "
    "Answer with the file path and a short explanation."
)
MAX_RESULTS = 20
MAX_LINES = 200


class FileTools:
    """The tools, bound to a root directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def _inside(self, path: str) -> Path:
        resolved = (self.root / path).resolve()
        if resolved != self.root and self.root not in resolved.parents:
            raise ValueError(f"{path!r} is outside the search root")
        return resolved

    def _files(self, pattern: str) -> list[Path]:
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
            for name in sorted(filenames):
                relative = os.path.relpath(os.path.join(dirpath, name), self.root)
                if fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(relative, pattern):
                    found.append(Path(dirpath) / name)
        return found

    def list_files(self, pattern: str = "*") -> list[str]:
        """List files whose name or relative path matches a glob pattern.

        Args:
            pattern: a glob such as "*.py" or "agents/*.py".
        """
        files = self._files(pattern)
        return [str(p.relative_to(self.root)) for p in files[:MAX_RESULTS]]

    def search_text(self, query: str, pattern: str = "*") -> list[str]:
        """Find lines containing a text (case-insensitive) in files matching a glob pattern.

        Args:
            query: the text to look for.
            pattern: a glob restricting the files searched, e.g. "*.py".
        """
        hits = []
        needle = query.lower()
        for path in self._files(pattern):
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if needle in line.lower():
                    hits.append(f"{path.relative_to(self.root)}:{number}: {line.strip()[:120]}")
                    if len(hits) >= MAX_RESULTS:
                        return hits
        return hits

    def read_file(self, path: str, start: int = 1, lines: int = 40) -> str:
        """Read lines of a file.

        Args:
            path: the file's path relative to the root.
            start: the first line to read (1-based).
            lines: how many lines to read.
        """
        target = self._inside(path)
        text = target.read_text(encoding="utf-8").splitlines()
        first = max(1, start)
        chunk = text[first - 1 : first - 1 + max(1, min(lines, MAX_LINES))]
        return "\n".join(f"{first + i}: {line}" for i, line in enumerate(chunk))

    def tools(self) -> list[Tool]:
        return [Tool(self.list_files), Tool(self.search_text), Tool(self.read_file)]


def make_agent(client: AsyncClient, root: str | os.PathLike[str], printer: Printer | None = None, **options) -> Agent:
    options.setdefault("tool_choice", ["required"])
    return Agent(
        client,
        FileTools(root).tools(),
        system=SYSTEM,
        on_event=printer.on_event if printer else None,
        on_tool_result=printer.on_tool_result if printer else None,
        **options,
    )


async def run(argv: Sequence[str] | None = None) -> int:
    p = parser("A file-search agent.", "Which file defines the Agent class?")
    p.add_argument("--root", default=".", help="the directory to search (default: the current one)")
    args = p.parse_args(argv)
    printer = Printer(quiet=args.quiet)
    async with AsyncClient(args.url, api_key=args.api_key) as client:
        agent = make_agent(client, args.root, printer, max_turns=args.max_turns, max_tokens=args.max_tokens)
        result = await agent.run(args.task)
    printer.summary(result)
    printer.console.print(result.output or "", markup=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return anyio.run(run, argv)


if __name__ == "__main__":
    sys.exit(main())
