"""Shared plumbing of the examples: arguments, and printing an agent's steps with rich."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from agentgate.agents.events import ContentDelta, Event, ToolCallComplete
from agentgate.agents.tools import ToolResult


def parser(description: str, default_task: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("task", nargs="?", default=default_task)
    p.add_argument("--url", default=None, help="the server (default AGENTGATE_URL or http://127.0.0.1:8000)")
    p.add_argument("--api-key", default=None, help="API key (default AGENTGATE_API_KEY)")
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--quiet", action="store_true", help="print the answer only")
    return p


class Printer:
    """on_event / on_tool_result callbacks that show the agent at work."""

    def __init__(self, console: Console | None = None, quiet: bool = False) -> None:
        self.console = console or Console(highlight=False)
        self.quiet = quiet
        self._streaming = False

    def on_event(self, event: Event) -> None:
        if self.quiet:
            return
        if isinstance(event, ContentDelta):
            self.console.print(event.text, end="", style="cyan", markup=False)
            self._streaming = True
        elif isinstance(event, ToolCallComplete):
            self._newline()
            self.console.print(f"[yellow]→ {event.call.name}[/yellow]({event.call.arguments})", markup=True)

    def on_tool_result(self, result: ToolResult) -> None:
        if self.quiet:
            return
        self._newline()
        style = "green" if result.ok else "red"
        text = result.content if len(result.content) < 300 else result.content[:297] + "..."
        self.console.print(f"[{style}]← {result.call.name}:[/{style}] ", end="")
        self.console.print(text, markup=False)

    def _newline(self) -> None:
        if self._streaming:
            self.console.print()
            self._streaming = False

    def summary(self, result: Any) -> None:
        self._newline()
        if not self.quiet:
            self.console.print(
                f"[dim]{result.turns} turn(s), tools: {', '.join(result.tools_called) or 'none'}, "
                f"{result.usage.prompt_tokens} prompt + {result.usage.completion_tokens} completion tokens, "
                f"stopped: {result.stop_reason}[/dim]"
            )
