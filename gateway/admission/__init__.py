"""What a request meets before the engine takes it, each refusal a 4xx that names why:

- :mod:`~gateway.admission.bounds`: limits on what a request may ask for (JSON nesting,
  prompt characters, the context length, generations per request): 400;
- :mod:`~gateway.admission.output_budget`: ``--max-tokens-default`` and ``--max-tokens-cap``;
- :mod:`~gateway.admission.rate_limits`: per-key requests and tokens per minute, in Redis: 429;
- :mod:`~gateway.admission.waiting`: a bound on engine requests waiting for their first
  token (backpressure): 429 with Retry-After.

Clients too slow to be served (headers, bodies, streams) are the HTTP edge's
(``gateway.http.slow_clients``).
"""
