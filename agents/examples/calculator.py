"""A calculator agent: arithmetic tools, the model decides which to call.

python -m agentgate.agents.examples.calculator "What is 12 * 7 + 3?" [--url URL]
"""

from __future__ import annotations

import ast
import operator
import sys
from collections.abc import Sequence

import anyio

from agentgate.agents import Agent, AsyncClient, tool
from agentgate.agents.examples._common import Printer, parser

SYSTEM = (
    "You are a calculator assistant. Use the tools to compute; never do arithmetic in your head. "
    "When you have the result, answer with it in one short sentence."
)


@tool
def add(a: float, b: float) -> float:
    """Add two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a * b


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


@tool
def evaluate(expression: str) -> float:
    """Evaluate an arithmetic expression with + - * / ** % // and parentheses.

    Args:
        expression: the expression, e.g. "12 * 7 + 3".
    """
    return _eval(ast.parse(expression, mode="eval"))


TOOLS = [add, multiply, evaluate]


def make_agent(client: AsyncClient, printer: Printer | None = None, **options) -> Agent:
    options.setdefault("tool_choice", ["required"])  # the first turn must call a tool; then the model decides
    return Agent(
        client,
        TOOLS,
        system=SYSTEM,
        on_event=printer.on_event if printer else None,
        on_tool_result=printer.on_tool_result if printer else None,
        **options,
    )


async def run(argv: Sequence[str] | None = None) -> int:
    args = parser("A calculator agent.", "What is 12 * 7 + 3?").parse_args(argv)
    printer = Printer(quiet=args.quiet)
    async with AsyncClient(args.url, api_key=args.api_key) as client:
        agent = make_agent(client, printer, max_turns=args.max_turns, max_tokens=args.max_tokens)
        result = await agent.run(args.task)
    printer.summary(result)
    printer.console.print(result.output or "", markup=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return anyio.run(run, argv)


if __name__ == "__main__":
    sys.exit(main())
