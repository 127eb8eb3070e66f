"""Agent programs as the engine sees them, under ``--scheduling-policy program``:

- `table`: what the engine remembers of each program it has served;
- `admission`: whether a new program may start now, given the programs already active.

The waiting queue's order under the policy is `engine.waiting_queue.ProgramQueue`.
"""
