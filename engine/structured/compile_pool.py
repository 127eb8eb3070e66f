"""Grammar compiles on a few threads, shared fairly by tenants (issue 50).

xgrammar compiles release the GIL, so compiles run on ``workers`` threads beside the engine
loop. A compile cannot be stopped once it runs (it is xgrammar's C++), so one client's
pathological schema holds its thread until it is done, maybe minutes. Two rules keep that
client's compiles from holding anyone else's:

- a tenant (an API key's digest; ``""`` for requests of no key) runs at most
  :func:`tenant_share` of the workers at once; its other compiles wait behind its own;
- a free worker takes the waiting tenant with the fewest compiles running, the longest
  waiting first among equals.

The time bound is the engine's (``engine.core``: a request whose grammar is not ready within
``--grammar-compile-timeout`` is a 400 naming its schema's field); a compile past it goes on in
the background, still counted against its tenant, so a client that keeps sending slow
schemas only queues behind itself. Requests without a grammar never wait here.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_Job = tuple[Future[Any], Callable[[], Any]]


def tenant_share(workers: int) -> int:
    """Most compiles one tenant runs at once: half the workers (at least one), so the others are
    always free for the rest."""
    return max(1, workers // 2)


def _dropped(job: _Job) -> bool:
    """Whether ``job`` was cancelled while it waited (its future then told so, as an executor does)."""
    future = job[0]
    return future.cancelled() and not future.set_running_or_notify_cancel()


class FairCompilePool:
    """Runs callables on ``workers`` threads, fair per tenant (see the module docstring)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("a compile pool needs at least one worker")
        self.workers = workers
        self._share = tenant_share(workers)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grammar")
        self._lock = threading.Lock()
        self._waiting: OrderedDict[str, deque[_Job]] = OrderedDict()  # by how long each has waited
        self._running: Counter[str] = Counter()
        self._busy = 0  # workers running a job: the sum of _running

    def submit(self, tenant: str, job: Callable[[], T]) -> Future[T]:
        """``job``'s result, once a worker has run it for ``tenant``. A cancelled future that has
        not started never runs."""
        future: Future[T] = Future()
        with self._lock:
            self._waiting.setdefault(tenant, deque()).append((future, job))
            starts = self._take()
        self._start(starts)
        return future

    def running(self, tenant: str) -> int:
        """Compiles of ``tenant`` running now."""
        with self._lock:
            return self._running[tenant]

    def _take(self) -> list[tuple[str, _Job]]:
        """Under the lock: the waiting jobs free workers start now, fewest running first."""
        taken = []
        while self._busy < self.workers:
            ready = [tenant for tenant in self._waiting if self._running[tenant] < self._share]
            if not ready:
                break
            tenant = min(ready, key=lambda t: self._running[t])  # min keeps the longest waiting of equals
            queue = self._waiting.pop(tenant)
            job = queue.popleft()
            while _dropped(job) and queue:  # jobs cancelled while they waited never take a worker
                job = queue.popleft()
            if queue:  # its next waits behind the others
                self._waiting[tenant] = queue
            if job[0].cancelled():
                continue
            taken.append((tenant, job))
            self._running[tenant] += 1
            self._busy += 1
        return taken

    def _start(self, starts: list[tuple[str, _Job]]) -> None:
        for tenant, (future, job) in starts:
            if future.set_running_or_notify_cancel():
                self._executor.submit(self._run, tenant, future, job)
            else:  # cancelled while it waited: its worker goes to the next
                self._finished(tenant)

    def _run(self, tenant: str, future: Future[Any], job: Callable[[], Any]) -> None:
        try:
            result = job()
        except BaseException as exc:  # noqa: BLE001 - the future carries it to whoever waits
            future.set_exception(exc)
        else:
            future.set_result(result)
        finally:
            self._finished(tenant)

    def _finished(self, tenant: str) -> None:
        with self._lock:
            self._running[tenant] -= 1
            self._busy -= 1
            if self._running[tenant] <= 0:
                del self._running[tenant]
            starts = self._take()
        self._start(starts)

    def shutdown(self) -> None:
        """Stop: waiting jobs are cancelled, running ones left to end on their own."""
        with self._lock:
            waiting = [future for queue in self._waiting.values() for future, _ in queue]
            self._waiting.clear()
        for future in waiting:
            future.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)
