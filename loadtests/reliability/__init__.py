"""Long reliability runs against a live ``agentgate serve`` (issue 18): what the
fast cases of ``tests/reliability/`` check once, repeated under load, with
figures. Each is ``python -m agentgate.loadtests.reliability.<name> --help``:

- ``faults``: the engine killed N times under load, the embedded redis-server
  killed N times under load;
- ``attacks``: fan-out, big bodies with a ``/health`` latency probe beside
  them, a disconnect storm with leak accounting;
- ``soak``: steady traffic for a while, gateway and engine memory sampled,
  the slope reported in MB per hour;
- ``fuzz``: schemathesis over ``/openapi.json``, positive and negative, 5xx
  counted.
"""
