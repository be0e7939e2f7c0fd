"""One HTTP policy for every provider API: shared client, retries, rate limit, circuit breaker.

- Retries only on 429 and 5xx (the server said "later"), with exponential backoff and full jitter,
  honouring Retry-After. Other 4xx, timeouts and refused connections fail at once: retrying them
  only makes the user wait longer for the same answer.
- A per-provider pace (request starts per second) and concurrency cap, so a 50-way fan-out does
  not trip the vendor's own rate limiter.
- A circuit breaker per provider: after N consecutive failures it rejects calls for T seconds, then
  lets one trial call through; success closes it, failure opens it again.
- Every failure becomes a ToolError naming the provider and the fix; secrets are scrubbed.

The httpx client and the guards hold asyncio primitives bound to one event loop, so they are kept
per loop (a CLI may call asyncio.run several times).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tools.base import (AuthError, ParseError, ProviderError, ProviderTimeout, RateLimitError,
                        ToolError)
from tools.settings import ToolSettings

log = logging.getLogger("deep_research.tools.http")


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every secret value found in `text` with ***."""
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return text


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class RetryPolicy:
    attempts: int = 3          # extra attempts after the first
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0

    def backoff(self, attempt: int) -> float:
        """Full-jitter exponential backoff for retry number `attempt` (0-based)."""
        return random.uniform(0, min(self.max_delay_s, self.base_delay_s * (2 ** attempt)))


class CircuitOpen(ProviderError):
    """The breaker is rejecting calls to a provider that kept failing."""


class ServiceUnavailable(ProviderError):
    """The provider failed on its side (5xx) or could not be reached: counts against the breaker."""


@dataclass
class CircuitBreaker:
    failure_threshold: int = 5
    reset_after_s: float = 30.0
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    _trial_running: bool = False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self.clock() - self.opened_at >= self.reset_after_s:
            return "half_open"
        return "open"

    def before_call(self, provider: str) -> None:
        """Raise CircuitOpen unless a call may go through now (closed, or the one half-open trial)."""
        state = self.state
        if state == "closed":
            return
        if state == "half_open" and not self._trial_running:
            self._trial_running = True
            return
        wait = max(0.0, self.reset_after_s - (self.clock() - (self.opened_at or 0.0)))
        raise CircuitOpen(
            f"{provider}: paused after {self.failures} failures in a row; trying again in {wait:.0f}s "
            "(the service looks down; use another provider meanwhile)",
            provider=provider, retry_after=round(wait, 1))

    def record_success(self) -> None:
        self.failures, self.opened_at, self._trial_running = 0, None, False

    def abandon_trial(self) -> None:
        self._trial_running = False

    def record_failure(self) -> None:
        self.failures += 1
        if self._trial_running or self.failures >= self.failure_threshold:
            self.opened_at = self.clock()
        self._trial_running = False


class RateLimiter:
    """A token bucket: up to `burst` requests start at once, then `rate_per_s` a second on average.

    A research fans out several searches in the same instant; evenly spaced starts would run
    them one after another, while a small burst keeps them parallel and the long-run rate the same.
    """

    def __init__(self, rate_per_s: float, burst: int = 5):
        self.rate = rate_per_s
        self.burst = max(1.0, float(burst))
        self._tokens = self.burst
        self._updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            self._tokens -= 1.0  # may go negative: later callers queue behind this one
            delay = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if delay > 0:
            await asyncio.sleep(delay)


@dataclass
class Guard:
    """Per-provider state shared by every client of that provider in one event loop."""

    breaker: CircuitBreaker
    limiter: RateLimiter
    slots: asyncio.Semaphore

    @classmethod
    def from_settings(cls, s: ToolSettings) -> Guard:
        return cls(CircuitBreaker(s.breaker_failures, s.breaker_reset_s), RateLimiter(s.rate_limit_per_s, s.rate_limit_burst),
                   asyncio.Semaphore(s.max_concurrency))


@dataclass
class _LoopState:
    client: httpx.AsyncClient | None = None
    guards: dict[tuple[str, str], Guard] = field(default_factory=dict)


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = weakref.WeakKeyDictionary()


def _loop_state() -> _LoopState:
    loop = asyncio.get_running_loop()
    state = _loops.get(loop)
    if state is None:
        state = _loops[loop] = _LoopState()
    return state


def timeout_from(s: ToolSettings) -> httpx.Timeout:
    return httpx.Timeout(connect=s.connect_timeout_s, read=s.read_timeout_s, write=s.read_timeout_s,
                         pool=s.connect_timeout_s)


def shared_client() -> httpx.AsyncClient:
    """The process's API client for the running loop: pooled connections, no redirects followed."""
    state = _loop_state()
    if state.client is None or state.client.is_closed:
        state.client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
            follow_redirects=False, headers={"Accept": "application/json"})
    return state.client


def guard_for(provider: str, key: str, settings: ToolSettings) -> Guard:
    """The guard of (provider, endpoint) in this loop, created from `settings` on first use."""
    guards = _loop_state().guards
    g = guards.get((provider, key))
    if g is None:
        g = guards[(provider, key)] = Guard.from_settings(settings)
    return g


async def aclose_shared() -> None:
    """Close this loop's shared client and forget its guards (shutdown, tests)."""
    state = _loops.pop(asyncio.get_running_loop(), None)
    if state and state.client:
        await state.client.aclose()


class ApiClient:
    """JSON calls to one provider's API under the shared policy. Errors come out as ToolErrors."""

    def __init__(self, provider: str, base_url: str, settings: ToolSettings, *, key_env: str | None = None,
                 secrets: Iterable[str | None] = (), client: httpx.AsyncClient | None = None,
                 guard: Guard | None = None, retry: RetryPolicy | None = None,
                 error_hook: Callable[[httpx.Response], ToolError | None] | None = None):
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.settings = settings
        self.key_env = key_env
        self.secrets = [s for s in secrets if s]
        self._client = client
        self._guard = guard
        self.error_hook = error_hook  # provider-specific meaning of a status (e.g. SearXNG's 403)
        self.retry = retry or RetryPolicy(settings.retry_attempts, settings.retry_base_delay_s,
                                          settings.retry_max_delay_s)

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client or shared_client()

    @property
    def guard(self) -> Guard:
        # Looked up per call, not kept: the guard's primitives belong to the running loop.
        return self._guard or guard_for(self.provider, self.base_url, self.settings)

    async def request_json(self, method: str, path: str, *, headers: dict[str, str] | None = None,
                           params: dict[str, Any] | None = None, json_body: Any = None) -> Any:
        """Send a request (retrying 429/5xx) and return the decoded JSON body."""
        url = f"{self.base_url}{path}"
        headers = {"User-Agent": self.settings.user_agent, **(headers or {})}
        breaker = self.guard.breaker
        breaker.before_call(self.provider)
        try:
            resp = await self._send_with_retries(method, url, headers, params, json_body)
        except (ServiceUnavailable, ProviderTimeout):
            # Only signs of a sick service count against the breaker; a bad key, a quota or a
            # refused request would not get better by pausing.
            breaker.record_failure()
            raise
        except ToolError:
            breaker.record_success()
            raise
        except BaseException:  # cancelled mid-call: free the half-open trial slot, judge nothing
            breaker.abandon_trial()
            raise
        breaker.record_success()
        return self._decode(resp)

    async def _send_with_retries(self, method: str, url: str, headers: dict[str, str],
                                 params: dict[str, Any] | None, json_body: Any) -> httpx.Response:
        attempt = 0
        while True:
            resp = await self._send_once(method, url, headers, params, json_body)
            if resp.status_code < 400:
                return resp
            retryable = resp.status_code == 429 or resp.status_code >= 500
            error = self._error_for(resp)
            if not retryable or attempt >= self.retry.attempts:
                raise error
            delay = parse_retry_after(resp.headers.get("Retry-After"))
            if delay is None:
                delay = self.retry.backoff(attempt)
            elif delay > self.retry.max_delay_s:
                raise error  # the server asked for a longer pause than we are willing to block for
            log.info("%s: HTTP %s, retry %d/%d in %.2fs", self.provider, resp.status_code, attempt + 1,
                     self.retry.attempts, delay)
            await asyncio.sleep(delay)
            attempt += 1

    async def _send_once(self, method: str, url: str, headers: dict[str, str],
                         params: dict[str, Any] | None, json_body: Any) -> httpx.Response:
        g = self.guard
        async with g.slots:
            await g.limiter.wait()
            try:
                async with asyncio.timeout(self.settings.total_timeout_s):
                    resp = await self.client.request(method, url, headers=headers, params=params,
                                                     json=json_body, timeout=timeout_from(self.settings))
                    await resp.aread()
                    return resp
            except (httpx.TimeoutException, TimeoutError):
                raise ProviderTimeout(
                    f"{self.provider} did not answer in time (connect {self.settings.connect_timeout_s}s, "
                    f"read {self.settings.read_timeout_s}s); try again or raise DEEP_RESEARCH_READ_TIMEOUT_S",
                    provider=self.provider) from None
            except httpx.HTTPError as e:
                raise ServiceUnavailable(
                    f"{self.provider}: cannot reach {self.base_url} ({type(e).__name__}); check the network "
                    "or the provider's base URL setting", provider=self.provider) from None

    def _detail(self, resp: httpx.Response) -> str:
        text = resp.text.strip().replace("\n", " ")
        try:
            body = resp.json()
            if isinstance(body, dict):
                for k in ("detail", "error", "message", "msg"):
                    if body.get(k):
                        text = json.dumps(body[k]) if not isinstance(body[k], str) else body[k]
                        break
        except ValueError:
            pass
        return redact(text[:300], self.secrets)

    def _error_for(self, resp: httpx.Response) -> ToolError:
        code, p = resp.status_code, self.provider
        if self.error_hook and (special := self.error_hook(resp)) is not None:
            return special
        detail = self._detail(resp)
        suffix = f": {detail}" if detail else ""
        if code in (401, 403):
            fix = f"check {self.key_env}" if self.key_env else "check the provider's credentials"
            return AuthError(f"{p} refused the credentials (HTTP {code}){suffix}; {fix}", provider=p)
        if code == 429:
            retry_after = parse_retry_after(resp.headers.get("Retry-After"))
            return RateLimitError(f"{p} is rate limiting us (HTTP 429){suffix}; wait a moment or lower "
                                  "DEEP_RESEARCH_RATE_LIMIT_PER_S", provider=p, retry_after=retry_after)
        if code in (402, 432, 433):  # payment required / plan or pay-as-you-go limit (Tavily)
            return RateLimitError(f"{p} quota is used up (HTTP {code}){suffix}; top up the plan or use "
                                  "another provider", provider=p)
        if code >= 500:
            return ServiceUnavailable(f"{p} failed on its side (HTTP {code}){suffix}; try again later", provider=p)
        return ProviderError(f"{p} rejected the request (HTTP {code}){suffix}", provider=p)

    def _decode(self, resp: httpx.Response) -> Any:
        try:
            return resp.json()
        except ValueError:
            snippet = redact(resp.text[:120].replace("\n", " "), self.secrets)
            raise ParseError(f"{self.provider} answered with something that is not JSON "
                             f"({resp.headers.get('content-type', 'no content type')}): {snippet!r}",
                             provider=self.provider) from None
