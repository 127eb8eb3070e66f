"""Engine addresses on this machine: IPC socket files in the temp directory."""

from __future__ import annotations

import os
import tempfile
import uuid


def private_address() -> str:
    """A fresh IPC address in the temp directory, for an engine on this machine."""
    return f"ipc://{tempfile.gettempdir()}/agentgate-engine-{uuid.uuid4().hex}.sock"


def remove_socket_file(address: str) -> None:
    """Remove the socket file of an ``ipc://`` address. libzmq leaves it behind
    when the bound socket closes (and a killed engine cannot clean up), so the
    engine and whoever spawned it both call this; other addresses are ignored."""
    if address.startswith("ipc://"):
        try:
            os.unlink(address.removeprefix("ipc://"))
        except FileNotFoundError:
            pass
