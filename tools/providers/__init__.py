"""Search providers by name: the registry the graph, CLI and MCP server build them from."""

from __future__ import annotations

from importlib import import_module

from tools.base import InvalidInput, SearchProvider
from tools.settings import ToolSettings, get_tool_settings

PROVIDERS: tuple[str, ...] = ("duckduckgo", "searxng", "tavily", "serper", "brave", "exa", "openai", "local")

# Imported on first use: a provider's module (and its SDK) costs nothing until someone picks it.
_CLASSES = {
    "duckduckgo": ("tools.providers.duckduckgo", "DuckDuckGoProvider"),
    "searxng": ("tools.providers.searxng", "SearxngProvider"),
    "tavily": ("tools.providers.tavily", "TavilyProvider"),
    "serper": ("tools.providers.serper", "SerperProvider"),
    "brave": ("tools.providers.brave", "BraveProvider"),
    "exa": ("tools.providers.exa", "ExaProvider"),
    "openai": ("tools.providers.openai", "OpenAIProvider"),
}

# The setting each provider cannot work without (for `configured_providers`).
_NEEDS = {"searxng": "searxng_url", "tavily": "tavily_api_key", "serper": "serper_api_key",
          "brave": "brave_api_key", "exa": "exa_api_key", "openai": "openai_api_key", "local": "corpus"}


def build_provider(name: str, *, settings: ToolSettings | None = None, corpus: str | None = None) -> SearchProvider:
    """The provider called `name`. InvalidInput for an unknown name, AuthError for a missing key."""
    key = (name or "").strip().lower()
    if key not in PROVIDERS:
        raise InvalidInput(f"unknown search provider {name!r}: choose from {', '.join(PROVIDERS)}")
    s = settings or get_tool_settings()
    if key == "local":
        folder = corpus or s.corpus
        if not folder:
            raise InvalidInput("the local provider needs a folder of documents: pass --corpus or set "
                               "DEEP_RESEARCH_CORPUS", provider="local")
        from tools.providers.local import LocalProvider

        return LocalProvider.from_folder(folder)
    module, cls = _CLASSES[key]
    return getattr(import_module(module), cls)(settings=s)


def build_providers(names: list[str] | str, *, settings: ToolSettings | None = None,
                    corpus: str | None = None) -> list[SearchProvider]:
    """Providers for several names (a list or "a,b"), each once, in the order given."""
    if isinstance(names, str):
        names = names.split(",")
    unique = list(dict.fromkeys(n.strip().lower() for n in names if n and n.strip()))
    if not unique:
        raise InvalidInput(f"no search provider named: choose from {', '.join(PROVIDERS)}")
    return [build_provider(n, settings=settings, corpus=corpus) for n in unique]


def configured_providers(settings: ToolSettings | None = None) -> list[str]:
    """Names usable with the current settings (keyless duckduckgo always)."""
    s = settings or get_tool_settings()
    return [n for n in PROVIDERS if n not in _NEEDS or getattr(s, _NEEDS[n])]


__all__ = ["PROVIDERS", "build_provider", "build_providers", "configured_providers"]
