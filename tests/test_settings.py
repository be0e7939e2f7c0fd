"""Settings precedence (call > environment > preset) and the prompt loader."""

from __future__ import annotations

from graph.settings import PRESETS, make_settings
from prompts import render, sections


def test_preset_fills_what_nobody_set():
    s = make_settings(depth="deep")
    assert s.resolved() == PRESETS["deep"]


def test_environment_beats_preset_and_call_beats_environment(monkeypatch):
    monkeypatch.setenv("DEEP_RESEARCH_MAX_ROUNDS", "5")
    monkeypatch.setenv("DEEP_RESEARCH_PROVIDERS", "tavily, brave")
    monkeypatch.setenv("DEEP_RESEARCH_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    s = make_settings(depth="quick")
    assert s.resolved().max_rounds == 5 and s.resolved().breadth == PRESETS["quick"].breadth
    assert s.providers == ["tavily", "brave"] and s.model == "env-model" and s.base_url == "http://127.0.0.1:9/v1"
    s = make_settings(depth="quick", max_rounds=2, providers=["local"], model="call-model", breadth=None)
    assert s.resolved().max_rounds == 2 and s.providers == ["local"] and s.model == "call-model"


def test_per_stage_models_fall_back_to_the_main_one():
    s = make_settings(model="big", plan_model="small")
    assert s.model_for("plan") == "small" and s.model_for("write") == "big"


def test_basic_is_quick_and_snapshot_replays():
    s = make_settings(depth="Basic", breadth=4)
    assert s.depth == "quick"
    again = make_settings(**s.overrides())
    assert again.resolved() == s.resolved()


def test_prompts_render_and_can_be_overridden(tmp_path, monkeypatch):
    system, user = render("plan", question="Why is the sky blue?", breadth=3, today="2026-01-01")
    assert "exactly 3 queries" in system and "Why is the sky blue?" in user and "$" not in system + user
    assert set(sections("report_lengths")) == {"concise", "standard", "detailed"}
    (tmp_path / "plan.md").write_text("Plan $breadth things.\n<!-- user -->\nQ: $question")
    monkeypatch.setenv("DEEP_RESEARCH_PROMPTS_DIR", str(tmp_path))
    assert render("plan", question="x", breadth=2) == ("Plan 2 things.", "Q: x")
    # files not in the override folder still come from the package
    assert "<source>" in render("extract", question="q", query="q", passages="")[0]
