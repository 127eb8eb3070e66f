"""Server-sent events, bytes in and ``data:`` payloads out; kept to a split and a
few comparisons per network read, since a load generator runs it per token."""

from __future__ import annotations


class SSEDecoder:
    """Server-sent events: feed bytes as they arrive, get the ``data`` payloads of complete events.

    Comments (``: ping``) and other fields (``event:``, ``id:``, ``retry:``) are skipped;
    several ``data:`` lines of one event are joined with newlines."""

    __slots__ = ("_buffer", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._buffer:
            chunk = self._buffer + chunk
        lines = chunk.split(b"\n")
        self._buffer = lines.pop()
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
        return out

    def flush(self) -> list[bytes]:
        """The last event when the stream ended without its blank line."""
        out = self.feed(b"\n\n") if (self._buffer or self._data) else []
        self._buffer = b""
        return out
