"""The APIs' request and response types, as msgspec structs: the bottom of the gateway, imported by the formats
and everything above them.
"""
