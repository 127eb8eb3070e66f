"""The ``agentgate`` command: the CLI, several gateway workers on one port, and what start-up says about who can
reach it.
"""
