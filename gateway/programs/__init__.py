"""Agent programs as the gateway sees them (the engine's side is ``engine.scheduling.programs``):
which program a request is a turn of, as the engine is told (:mod:`~gateway.programs.tags`),
where and when its last turn ended, in Redis for every replica
(:mod:`~gateway.programs.last_turns`), and its last turn's own tokens, so the next turn
starts with them (:mod:`~gateway.programs.turn_tokens`)."""
