"""A DELETE of a background response still running stays deleted (issue 50): its run is aborted,
and its final save does not bring it back. Real HTTP to the live null server (a background
response runs after its answer, which an in-process transport would wait for)."""

from __future__ import annotations

import time

import httpx


def test_a_deleted_running_background_response_stays_deleted(null):
    with httpx.Client(base_url=null.url, headers=null.headers, timeout=30) as client:
        body = {"input": "hi", "max_output_tokens": 600, "background": True, "ignore_eos": True}
        r = client.post("/v1/responses", json=body)
        assert r.status_code == 200, r.text
        rid, request_id = r.json()["id"], r.headers["x-request-id"]
        deadline = time.monotonic() + 10
        while client.get(f"/v1/responses/{rid}").json()["status"] != "in_progress":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        r = client.delete(f"/v1/responses/{rid}")
        assert r.status_code == 200 and r.json()["deleted"] is True

        def running() -> bool:
            listed = client.get("/v1/requests", headers=null.admin_headers).json()["data"]
            return any(e["id"].endswith(f".{request_id}") for e in listed)

        deadline = time.monotonic() + 10
        while running():  # aborted: gone well before its 600 tokens (2.4 s) would end
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)  # its last save, had it one, is written by now
        assert client.get(f"/v1/responses/{rid}").status_code == 404
        assert client.delete(f"/v1/responses/{rid}").status_code == 404
