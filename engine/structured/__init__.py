"""Constrained decoding: grammars compiled off the step loop, one matcher per request, and how a budgeted reply
closes.
"""
