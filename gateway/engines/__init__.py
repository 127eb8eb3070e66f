"""The engines behind the gateway, as the gateway sees them: the pool it routes over and
fans operator calls out to (:mod:`~gateway.engines.pool`), the engines it started and
restarts (:mod:`~gateway.engines.supervisor`), the engines announced in Redis
(:mod:`~gateway.engines.registry`, written by each engine process) and found there while
the gateway runs (:mod:`~gateway.engines.discovery`). The requests in flight on them are
:mod:`gateway.state.requests_in_flight`'s."""
