"""What the test suites share (imported as ``tests.support.*``; pytest runs with
``--import-mode=append``, so the repository root comes after site-packages and
``agents`` stays the OpenAI Agents SDK):

- ``servers``: live ``agentgate`` processes (``serve``, ``engine``, ``gateway``) and a
  real ``redis-server`` on loopback, the keys they are started with;
- ``fixtures``: the session-wide servers every suite may ask for (a pytest plugin);
- ``http``: request bodies, SSE reading and checking, ``/metrics``, waiting;
- ``inprocess``: the gateway in this process (``create_app`` + ``httpx.ASGITransport``)
  in front of a null-runner engine served from a thread;
- ``scripted``: a scripted OpenAI server (``httpx.MockTransport``) for SDK unit tests;
- ``templates``, ``tool_schemas`` and ``tool_calls``: chat templates, random tool
  definitions, and tool-call replies to parse;
- ``browser``: Chromium through Playwright and a scripted site, for the playground.
"""
