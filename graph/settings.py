"""ResearchSettings: what one research run may do, and with which models and providers.

Precedence is per-call argument > environment (DEEP_RESEARCH_*) > depth preset. pydantic-settings
gives the first two (init kwargs beat env); the preset only fills what neither of them set, which
is why the depth-dependent knobs default to None here and are read through `resolved()`.

The same object is the graph's LangGraph runtime context, so Studio shows these fields as the
graph's configuration. Secrets are not fields here: the API key is read from the environment by
graph/llm.py when a model is built, so it never travels in a context, a checkpoint or a result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from typing_extensions import Annotated

Depth = Literal["quick", "standard", "deep"]
ReportLength = Literal["concise", "standard", "detailed"]
DEPTH_ALIASES = {"basic": "quick", "normal": "standard", "thorough": "deep"}
MAX_QUESTION_CHARS = 2000


@dataclass(frozen=True)
class Preset:
    breadth: int  # sub-queries in the first round (follow-ups per later round at most this)
    max_rounds: int
    pages_per_query: int
    max_sources: int

    def describe(self) -> str:
        return (f"{self.max_rounds} round(s), up to {self.breadth} queries per round, "
                f"{self.pages_per_query} pages read per query, at most {self.max_sources} sources")


PRESETS: dict[str, Preset] = {
    "quick": Preset(breadth=3, max_rounds=1, pages_per_query=2, max_sources=10),
    "standard": Preset(breadth=3, max_rounds=2, pages_per_query=3, max_sources=30),
    "deep": Preset(breadth=5, max_rounds=4, pages_per_query=4, max_sources=80),
}


def _split_csv(v: Any) -> Any:
    if isinstance(v, str):
        return [p.strip() for p in v.split(",") if p.strip()]
    return v


CsvList = Annotated[list[str], NoDecode]


class ResearchSettings(BaseSettings):
    """Everything a run may vary. Construct with keyword overrides; unset fields come from env."""

    model_config = SettingsConfigDict(env_prefix="DEEP_RESEARCH_", extra="forbid",
                                      validate_default=True)

    # scope
    depth: Depth = Field("standard", description="quick | standard | deep (basic = quick)")
    breadth: int | None = Field(None, ge=1, le=10, description="Sub-queries per round.")
    max_rounds: int | None = Field(None, ge=1, le=8, description="Search/reflect rounds at most.")
    pages_per_query: int | None = Field(None, ge=0, le=10, description="Pages read per sub-query.")
    max_sources: int | None = Field(None, ge=1, le=300, description="Sources held at most.")
    report_length: ReportLength = Field("standard", description="concise | standard | detailed")

    # budgets: a run that hits one stops searching and writes from what it has
    token_budget: int = Field(400_000, ge=1_000, le=20_000_000,
                              description="Prompt + completion tokens for the whole run.")
    time_budget_s: float = Field(300.0, ge=5, le=7_200,
                                 description="Seconds before the run stops searching and writes.")

    # search
    providers: CsvList = Field(default_factory=lambda: ["duckduckgo"],
                               description="Search providers, fused when several.")
    corpus: str | None = Field(None, description="Folder of .md/.txt/.html for the local provider.")
    results_per_query: int = Field(8, ge=1, le=20)
    freshness: Literal["day", "week", "month", "year"] | None = None
    region: str | None = Field(None, max_length=16)
    include_domains: CsvList = Field(default_factory=list)
    exclude_domains: CsvList = Field(default_factory=list)
    max_concurrency: int = Field(8, ge=1, le=64, description="Sub-queries searched at once.")

    # models: any OpenAI-compatible endpoint; one model per stage, falling back to `model`
    model: str = Field("gpt-4.1-mini", description="Model for every stage without its own.")
    plan_model: str | None = None
    extract_model: str | None = None
    reflect_model: str | None = None
    write_model: str | None = None
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (DEEP_RESEARCH_BASE_URL, "
                                                   "else OPENAI_BASE_URL); OpenAI when unset.")
    temperature: float | None = Field(None, ge=0, le=2)
    llm_timeout_s: float = Field(120.0, ge=1, le=1800)
    llm_max_retries: int = Field(2, ge=0, le=10)

    # prompt budgets (tokens, estimated at 4 characters a token)
    extract_passage_tokens: int = Field(1_200, ge=200, le=50_000)
    reflect_passage_tokens: int = Field(2_400, ge=200, le=100_000)

    # objects tests and notebooks hand in; never serialised, never in a schema
    _chat_model: Any = PrivateAttr(None)
    _search_providers: Any = PrivateAttr(None)

    @field_validator("base_url", mode="after")
    @classmethod
    def _openai_base_url(cls, v: str | None) -> str | None:
        # the variable every OpenAI client reads, so a user's existing setup just works
        return v or os.environ.get("OPENAI_BASE_URL") or None

    @field_validator("depth", mode="before")
    @classmethod
    def _depth_alias(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = v.strip().lower()
            return DEPTH_ALIASES.get(v, v)
        return v

    @field_validator("providers", "include_domains", "exclude_domains", mode="before")
    @classmethod
    def _csv(cls, v: Any) -> Any:
        return _split_csv(v)

    @field_validator("providers")
    @classmethod
    def _providers_nonempty(cls, v: list[str]) -> list[str]:
        v = [p.lower() for p in v]
        if not v:
            raise ValueError("providers is empty: name at least one, e.g. duckduckgo")
        return list(dict.fromkeys(v))

    # -- resolution ---------------------------------------------------------------------------

    @property
    def preset(self) -> Preset:
        return PRESETS[self.depth]

    def resolved(self) -> Preset:
        """The effective scope: explicit values (call or env) over the depth preset."""
        p = self.preset
        return Preset(
            breadth=self.breadth if self.breadth is not None else p.breadth,
            max_rounds=self.max_rounds if self.max_rounds is not None else p.max_rounds,
            pages_per_query=self.pages_per_query if self.pages_per_query is not None else p.pages_per_query,
            max_sources=self.max_sources if self.max_sources is not None else p.max_sources,
        )

    def model_for(self, stage: Literal["plan", "extract", "reflect", "write"]) -> str:
        return getattr(self, f"{stage}_model") or self.model

    # -- injection for offline runs -----------------------------------------------------------

    def with_chat_model(self, model: Any) -> "ResearchSettings":
        """Use this LangChain chat model for every stage (tests, notebooks, demos)."""
        self._chat_model = model
        return self

    def with_search_providers(self, providers: list[Any]) -> "ResearchSettings":
        """Use these SearchProvider objects instead of building them from `providers`."""
        self._search_providers = list(providers)
        return self

    def overrides(self) -> dict[str, Any]:
        """The fields that differ from a fresh env-backed instance: what a resume must replay."""
        return self.model_dump(exclude_unset=True)


class SettingsError(ValueError):
    """Bad settings; the message names the field and the allowed range."""


def make_settings(**overrides: Any) -> ResearchSettings:
    """ResearchSettings from per-call overrides (None means 'not given'), errors made readable."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return ResearchSettings(**given)
    except ValidationError as e:
        raise SettingsError(describe_validation_error(e)) from None


def describe_validation_error(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        field = ".".join(str(p) for p in err["loc"]) or "input"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "literal_error":
            msg = f"got {err.get('input')!r}; allowed: {err['ctx']['expected']}"
        elif err["type"] == "extra_forbidden":
            msg = "unknown setting"
        parts.append(f"{field}: {msg}")
    return "; ".join(parts)


def settings_from(context: Any, snapshot: dict[str, Any] | None = None) -> ResearchSettings:
    """The run's settings inside a node: the runtime context, else the state's snapshot, else env.

    LangGraph leaves runtime.context None when a caller (Studio, the SDK) passes no context; a dict
    context arrives when the caller sends plain JSON.
    """
    if isinstance(context, ResearchSettings):
        return context
    if isinstance(context, dict):
        return make_settings(**context)
    return make_settings(**(snapshot or {}))
