"""The agentgate gateway: an OpenAI-compatible HTTP front end (Starlette +
sse-starlette on uvicorn) that is a client of one or more engine processes.

It imports only the engine's protocol, client and torch-free helpers, never
the engine core: see ``tests/gateway/test_gateway_boundary.py``.
"""

from importlib.metadata import PackageNotFoundError, version


def package_version() -> str:
    try:
        return version("agentgate")
    except PackageNotFoundError:
        return "0+unknown"
