"""Agent programs as the engine sees them, under ``--scheduling-policy program``:

- `table`: what the engine remembers of each program it has served;
- `admission`: whether a new program may start now, given the programs already active;
- `queue`: the waiting queue in the order of their ranks (on the FCFS queue and its wait bound,
  ``engine.scheduling.waiting_queue``).
"""
