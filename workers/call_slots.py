"""How many calls to each vendor one calls process has running: a slow vendor (answers taking
10 s) holds a share of the process's threads, never all of them, so another vendor's calls go on at
their own pace (issue 20). Per process, not per deploy: what it guards is this process's threads
(``LIAISON_CALL_THREADS``); what a vendor may take from every host together is its rate limit and
its ``MAX_IN_FLIGHT``, both shared through the database or Redis."""

from __future__ import annotations

import threading
from collections import Counter


class CallSlots:
    """A counting semaphore per provider that never blocks: a call finding its provider's slots
    all taken goes back to the queue (``ComeBackLater``) instead of holding a thread to wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()

    def take(self, provider: str, limit: int) -> bool:
        with self._lock:
            if self._running[provider] >= limit:
                return False
            self._running[provider] += 1
            return True

    def give_back(self, provider: str) -> None:
        with self._lock:
            self._running[provider] -= 1
            if self._running[provider] <= 0:
                del self._running[provider]

    def running(self, provider: str) -> int:
        with self._lock:
            return self._running[provider]
