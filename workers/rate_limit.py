"""Pure: a token bucket. The caller passes the clock and does the sleeping, so tests need neither."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    rate_per_s: float
    burst: float = 1.0
    _tokens: float = field(default=-1.0, init=False)
    _last: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0 or self.burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self._tokens = self.burst

    def wait_for(self, now: float) -> float:
        """Take one token; return how long to wait first (0 when one is available now)."""
        if self._last is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate_per_s)
        self._last = now
        self._tokens -= 1
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.rate_per_s
