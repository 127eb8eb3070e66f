"""Which kernel a linear runs, chosen at load by measuring on this machine, and the disk cache that remembers the
verdicts.
"""
