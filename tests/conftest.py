"""Shared fixtures. Everything here runs offline against local things."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DEEP_RESEARCH_SHARED", ROOT.parent / "shared"))


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path_factory):
    """No test sees the developer's keys or writes into their data folder."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "DEEP_RESEARCH_API_KEY", "DEEP_RESEARCH_MODEL",
                "DEEP_RESEARCH_PROVIDERS", "DEEP_RESEARCH_CORPUS", "DEEP_RESEARCH_DEPTH",
                "DEEP_RESEARCH_PROMPTS_DIR", "TAVILY_API_KEY", "SERPER_API_KEY", "BRAVE_API_KEY",
                "EXA_API_KEY", "SEARXNG_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DEEP_RESEARCH_DATA_DIR", str(tmp_path_factory.mktemp("data")))


@pytest.fixture
def question() -> str:
    return "Do heat pumps work in cold climates, and what do they cost to run?"
