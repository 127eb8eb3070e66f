"""Shared state in Redis: the connection and the embedded server, sessions, the request registry, cluster-wide
operator actions and API keys.
"""
