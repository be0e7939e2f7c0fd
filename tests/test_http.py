"""The shared HTTP policy against a real local server: retries, Retry-After, errors, breaker, pacing."""

import asyncio
import itertools
import time

import pytest

from tests.fakes.search_apis import Reply, shared_fake_web
from tools.base import AuthError, ParseError, ProviderError, ProviderTimeout, RateLimitError
from tools.http import (ApiClient, CircuitBreaker, CircuitOpen, Guard, RateLimiter, ServiceUnavailable,
                        parse_retry_after, redact)
from tools.settings import ToolSettings

SECRET = "sk-very-secret-value-123"
_ids = itertools.count()


@pytest.fixture(scope="module")
def web():
    return shared_fake_web()


@pytest.fixture
def settings(tmp_path):
    return ToolSettings(retry_attempts=2, retry_base_delay_s=0.01, retry_max_delay_s=1.0,
                        read_timeout_s=0.3, connect_timeout_s=0.5, total_timeout_s=2.0,
                        breaker_failures=2, breaker_reset_s=0.3, data_dir=tmp_path)


def make(web, settings, **kw):
    """A client for a fresh provider name and path, so tests never share guards or scripts."""
    n = next(_ids)
    client = ApiClient(f"prov{n}", f"{web.url}/api{n}", settings, key_env="PROV_API_KEY", secrets=[SECRET], **kw)
    return client, f"/api{n}/x"


async def test_retries_5xx_then_succeeds(web, settings):
    client, path = make(web, settings)
    web.script(path, Reply(503), Reply(502), Reply(200, {"ok": True}))
    assert await client.request_json("GET", "/x") == {"ok": True}
    assert web.count(path) == 3


async def test_gives_up_after_attempts_on_5xx(web, settings):
    client, path = make(web, settings)
    web.script(path, *[Reply(500, {"error": "boom"})] * 3)
    with pytest.raises(ServiceUnavailable, match=r"prov\d+ failed on its side \(HTTP 500\): boom"):
        await client.request_json("GET", "/x")
    assert web.count(path) == settings.retry_attempts + 1


async def test_honours_retry_after_on_429(web, settings):
    client, path = make(web, settings)
    web.script(path, Reply(429, headers={"Retry-After": "0.3"}), Reply(200, {"ok": 1}))
    t0 = time.perf_counter()
    assert await client.request_json("POST", "/x", json_body={"q": 1}) == {"ok": 1}
    assert time.perf_counter() - t0 >= 0.3
    assert web.count(path) == 2


async def test_long_retry_after_fails_fast_with_the_wait(web, settings):
    client, path = make(web, settings)
    web.script(path, Reply(429, {"message": "slow down"}, headers={"Retry-After": "120"}))
    with pytest.raises(RateLimitError) as e:
        await client.request_json("GET", "/x")
    assert e.value.retry_after == 120 and e.value.provider == client.provider
    assert web.count(path) == 1


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_errors_name_the_variable_and_hide_the_key(web, settings, status):
    client, path = make(web, settings)
    web.script(path, Reply(status, {"detail": f"bad key {SECRET}"}))
    with pytest.raises(AuthError) as e:
        await client.request_json("GET", "/x", headers={"Authorization": f"Bearer {SECRET}"})
    assert "PROV_API_KEY" in e.value.message and SECRET not in str(e.value)
    assert web.count(path) == 1  # no retry on auth errors


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_other_4xx_are_not_retried(web, settings, status):
    client, path = make(web, settings)
    web.script(path, Reply(status, {"message": "nope"}))
    with pytest.raises(ProviderError, match=f"HTTP {status}"):
        await client.request_json("GET", "/x")
    assert web.count(path) == 1


async def test_quota_exhausted_is_a_rate_limit_without_retry(web, settings):
    client, path = make(web, settings)
    web.script(path, Reply(432, {"detail": {"error": "plan limit exceeded"}}))
    with pytest.raises(RateLimitError, match="quota"):
        await client.request_json("GET", "/x")
    assert web.count(path) == 1


async def test_garbage_body_is_a_parse_error(web, settings):
    client, path = make(web, settings)
    web.script(path, Reply(200, "<html>surprise</html>", {"Content-Type": "text/html"}))
    with pytest.raises(ParseError, match="not JSON"):
        await client.request_json("GET", "/x")


async def test_slow_answer_is_a_timeout_without_retry(web, settings):
    client, path = make(web, settings)
    web.script(path, Reply(200, {"late": True}, delay_s=1.0))
    with pytest.raises(ProviderTimeout, match="did not answer in time"):
        await client.request_json("GET", "/x")
    assert web.count(path) == 1


async def test_unreachable_host_is_a_provider_error(settings):
    client = ApiClient("gone", "http://127.0.0.1:9", settings)  # discard port: nothing listens
    with pytest.raises(ServiceUnavailable, match="cannot reach"):
        await client.request_json("GET", "/x")


async def test_breaker_opens_then_recovers_after_one_trial(web, settings):
    settings = settings.model_copy(update={"retry_attempts": 0})
    client, path = make(web, settings)
    web.script(path, Reply(500), Reply(500))
    for _ in range(2):
        with pytest.raises(ServiceUnavailable):
            await client.request_json("GET", "/x")
    with pytest.raises(CircuitOpen, match="paused after 2 failures"):
        await client.request_json("GET", "/x")
    assert web.count(path) == 2  # the open circuit sent nothing
    await asyncio.sleep(settings.breaker_reset_s)
    web.script(path, Reply(200, {"back": True}))
    assert await client.request_json("GET", "/x") == {"back": True}
    assert client.guard.breaker.state == "closed"


def test_breaker_half_open_allows_a_single_trial_and_reopens_on_failure():
    now = [0.0]
    b = CircuitBreaker(failure_threshold=1, reset_after_s=10, clock=lambda: now[0])
    b.record_failure()
    assert b.state == "open"
    with pytest.raises(CircuitOpen):
        b.before_call("p")
    now[0] = 10.0
    b.before_call("p")  # the trial
    with pytest.raises(CircuitOpen):
        b.before_call("p")  # a second caller while the trial runs
    b.record_failure()
    assert b.state == "open"
    now[0] = 20.0
    b.before_call("p")
    b.record_success()
    assert b.state == "closed"


async def test_auth_errors_do_not_open_the_breaker(web, settings):
    client, path = make(web, settings)
    web.script(path, *[Reply(401)] * 3)
    for _ in range(3):
        with pytest.raises(AuthError):
            await client.request_json("GET", "/x")
    assert client.guard.breaker.state == "closed"


async def test_rate_limiter_spaces_request_starts():
    limiter = RateLimiter(rate_per_s=50, burst=1)
    t0 = time.perf_counter()
    await asyncio.gather(*(limiter.wait() for _ in range(6)))
    assert time.perf_counter() - t0 >= 5 / 50 * 0.9


async def test_rate_limiter_lets_a_burst_through_then_keeps_the_rate():
    limiter = RateLimiter(rate_per_s=20, burst=4)
    starts: list[float] = []

    async def one() -> None:
        await limiter.wait()
        starts.append(time.perf_counter())

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(8)))
    starts.sort()
    assert starts[3] - t0 < 0.03  # a fan-out of four starts together
    assert starts[7] - t0 >= 4 / 20 * 0.9  # the other four wait for tokens at 20 a second


async def test_concurrency_cap_is_respected(web, settings):
    guard = Guard(CircuitBreaker(), RateLimiter(1000), asyncio.Semaphore(2))
    client, path = make(web, settings, guard=guard)
    web.script(path, *[Reply(200, {"i": i}, delay_s=0.1) for i in range(4)])
    t0 = time.perf_counter()
    await asyncio.gather(*(client.request_json("GET", "/x") for _ in range(4)))
    assert time.perf_counter() - t0 >= 0.2  # 4 calls, 2 at a time, 0.1 s each


def test_parse_retry_after_forms():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)


def test_redact():
    assert redact(f"key={SECRET}!", [SECRET, None]) == "key=***!"


def test_one_client_works_across_event_loops(web, settings):
    # A CLI may call asyncio.run more than once with the same provider objects.
    client, path = make(web, settings)
    web.script(path, Reply(200, {"n": 1}), Reply(200, {"n": 2}))
    assert asyncio.run(client.request_json("GET", "/x")) == {"n": 1}
    assert asyncio.run(client.request_json("GET", "/x")) == {"n": 2}
