"""The engine's process front: the wire protocol, the client front ends hold, the engine process behind its
socket, addresses, socket keys and spawning.
"""
