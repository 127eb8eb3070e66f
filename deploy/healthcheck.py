"""The images' HEALTHCHECK: exit 0 while the gateway's /health answers 200 (an engine serves)."""

import os
import sys
import urllib.request

PORT = os.environ.get("AGENTGATE_PORT", "8000")

try:
    urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=4)
except OSError as exc:  # URLError and HTTPError (503: no engine serves) included
    sys.exit(f"unhealthy: {exc}")
