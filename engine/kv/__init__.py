"""The paged KV cache's bookkeeping: the block pool, per-request block tables and the chained block hashes of
prefix caching.
"""
