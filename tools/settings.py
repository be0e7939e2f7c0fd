"""Settings for search providers, HTTP policy, cache and page reader, read from the environment.

Our own knobs use the DEEP_RESEARCH_ prefix; provider keys and endpoints keep the names their
vendors document (TAVILY_API_KEY, SEARXNG_URL, ...) so existing setups work unchanged. Base-URL
overrides exist for every provider so tests (and self-hosted proxies) can point them elsewhere.
"""

from __future__ import annotations

import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def default_data_dir() -> Path:
    """Where persistent files (cache, checkpoints) live when DEEP_RESEARCH_DATA_DIR is unset."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "deep-research"


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class ToolSettings(BaseSettings):
    """Every knob of tools/. Per-call arguments win over these; these win over the defaults."""

    model_config = SettingsConfigDict(env_prefix="DEEP_RESEARCH_", extra="ignore",
                                      populate_by_name=True)

    # --- safety and reading
    allow_private_urls: bool = Field(
        False, description="Let the reader fetch loopback/private addresses (local use and tests only).")
    max_page_bytes: int = Field(5_000_000, ge=10_000)
    max_redirects: int = Field(5, ge=0, le=20)
    render_js: bool = False
    extract_processes: int = Field(0, ge=0, le=32, description=(
        "Extract pages in this many worker processes instead of a thread (about 80 MB each): takes the "
        "CPU work off the event loop of a busy server. 0 = a thread; the HTTP server defaults to one "
        "per core, up to 4, on machines with 2 or more."))
    chromium_path: str | None = Field(None, description="Browser for render_js; default: Playwright's or system chromium.")
    user_agent: str = "Mozilla/5.0 (compatible; deep-research-mcp/0.1; +https://github.com/deep-research-mcp)"

    # --- HTTP policy
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(20.0, gt=0)
    total_timeout_s: float = Field(45.0, gt=0, description="Deadline for one request, body included.")
    retry_attempts: int = Field(3, ge=0, le=10, description="Extra attempts after a 429 or 5xx.")
    retry_base_delay_s: float = Field(0.5, ge=0)
    retry_max_delay_s: float = Field(20.0, ge=0, description="Longest wait; a longer Retry-After fails fast.")
    rate_limit_per_s: float = Field(10.0, gt=0, description="Request starts per second, per provider.")
    rate_limit_burst: int = Field(6, ge=1, le=100, description="Requests that may start at once before the rate applies.")
    max_concurrency: int = Field(8, ge=1, description="Requests in flight, per provider.")
    breaker_failures: int = Field(5, ge=1, description="Consecutive failures that open the circuit.")
    breaker_reset_s: float = Field(30.0, ge=0, description="How long an open circuit rejects calls.")

    # --- cache
    cache_enabled: bool = True
    cache_ttl_s: float = Field(6 * 3600, ge=0)
    data_dir: Path = Field(default_factory=default_data_dir)

    # --- query policy: keywords (whole word, case-insensitive) or /regex/ patterns
    query_deny: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # --- providers
    corpus: str | None = Field(None, description="Folder for the local provider.")
    searxng_url: str | None = Field(None, validation_alias=_env("SEARXNG_URL", "DEEP_RESEARCH_SEARXNG_URL"))
    tavily_api_key: SecretStr | None = Field(None, validation_alias=_env("TAVILY_API_KEY"))
    tavily_base_url: str = Field("https://api.tavily.com", validation_alias=_env("TAVILY_BASE_URL"))
    serper_api_key: SecretStr | None = Field(None, validation_alias=_env("SERPER_API_KEY"))
    serper_base_url: str = Field("https://google.serper.dev", validation_alias=_env("SERPER_BASE_URL"))
    brave_api_key: SecretStr | None = Field(
        None, validation_alias=_env("BRAVE_API_KEY", "BRAVE_SEARCH_API_KEY"))
    brave_base_url: str = Field("https://api.search.brave.com", validation_alias=_env("BRAVE_BASE_URL"))
    exa_api_key: SecretStr | None = Field(None, validation_alias=_env("EXA_API_KEY"))
    exa_base_url: str = Field("https://api.exa.ai", validation_alias=_env("EXA_BASE_URL"))
    openai_api_key: SecretStr | None = Field(None, validation_alias=_env("OPENAI_API_KEY"))
    openai_base_url: str = Field("https://api.openai.com/v1", validation_alias=_env("OPENAI_BASE_URL"))
    openai_search_model: str = "gpt-4.1-mini"
    duckduckgo_safesearch: str = Field("moderate", pattern="^(on|moderate|off)$")

    @field_validator("query_deny", mode="before")
    @classmethod
    def _split_rules(cls, v: object) -> object:
        # A JSON list is exact; a plain string is split on commas for the common keyword case.
        if isinstance(v, str):
            v = v.strip()
            if v.startswith("["):
                return json.loads(v)
            return [part.strip() for part in v.split(",") if part.strip()]
        return v

    @property
    def cache_path(self) -> Path:
        return self.data_dir / "cache.sqlite3"


@lru_cache(maxsize=1)
def get_tool_settings() -> ToolSettings:
    """The process-wide settings, read from the environment once (tests: `reset_tool_settings()`)."""
    return ToolSettings()


def reset_tool_settings() -> None:
    """Forget the cached settings so the next call re-reads the environment."""
    get_tool_settings.cache_clear()
