"""The benchmark helpers and the orchestration benchmark against the real reference instrument.

The instrument (../shared/bench) lives beside the project; tests that need it skip when it is absent.
Timings are printed by the benchmark, never asserted: CI machines are too noisy for that. What is
asserted is that the figures are consistent with each other and with the servers' own logs.
"""

from __future__ import annotations

import json

import httpx
import pytest

from benchmarks.common import (InstrumentMissing, critical_path, find_bench_dir, load_chain, print_table,
                               start_instrument, write_json)
from tests.conftest import SHARED

BENCH = SHARED / "bench"
needs_bench = pytest.mark.skipif(not (BENCH / "fakellm.py").is_file(),
                                 reason=f"reference instrument not found in {BENCH} (set DEEP_RESEARCH_SHARED)")


def op(start: float, end: float, kind: str = "json_schema:Plan") -> dict:
    return {"start": start, "end": end, "kind": kind}


def test_critical_path_is_the_longest_sequential_chain():
    ops = [op(0.0, 0.5), op(0.6, 0.9, "searxng"), op(0.6, 0.8, "searxng"), op(0.95, 1.25, "page"),
           op(1.3, 1.8, "json_schema:Reflection"), op(1.3, 1.7, "json_schema:Extraction")]
    cp = critical_path(ops)
    # plan -> the longer search -> page -> reflection: 0.5 + 0.3 + 0.3 + 0.5
    assert cp["seconds"] == pytest.approx(1.6) and cp["length"] == 4
    assert cp["kinds"] == ["llm:Plan", "search", "page", "llm:Reflection"]
    assert cp["idle_s"] == pytest.approx(0.1 + 0.05 + 0.05) and cp["max_gap_ms"] == pytest.approx(100.0)
    assert critical_path([])["seconds"] == 0.0


def test_overlapping_operations_never_chain():
    cp = critical_path([op(0.0, 1.0), op(0.5, 1.5), op(0.9, 2.0)])
    assert cp["length"] == 1 and cp["seconds"] == pytest.approx(1.1)


def test_missing_instrument_names_the_folder_and_the_fix(tmp_path, capsys):
    with pytest.raises(InstrumentMissing, match="--bench"):
        find_bench_dir(tmp_path)
    from benchmarks.orchestration import main

    assert main(["--bench", str(tmp_path)]) == 0
    assert "SKIPPED orchestration benchmark" in capsys.readouterr().out


def test_table_and_json_output(tmp_path, capsys):
    print_table([{"a": 1.23456, "b": 25_000, "c": None}], [("a", "A"), ("b", "B"), ("c", "C")], title="T")
    out = capsys.readouterr().out
    assert "| A     | B     | C |" in out and "| 1.235 | 25.0k | - |" in out
    path = write_json("unit", {"x": tmp_path}, tmp_path)
    assert json.loads(path.read_text()) == {"x": str(tmp_path)}
    assert (tmp_path / "unit-latest.json").read_text() == path.read_text()


@needs_bench
@pytest.mark.slow
async def test_instrument_servers_answer_and_log(tmp_path):
    with start_instrument(BENCH, llm_latency=0.0, search_latency=0.0, page_latency=0.0, log_dir=tmp_path) as inst:
        async with httpx.AsyncClient() as client:
            r = await client.post(inst.llm_base_url + "/chat/completions",
                                  json={"model": "fake", "messages": [{"role": "user", "content": "cite [3]"}]})
            assert r.status_code == 200 and "[3]" in r.json()["choices"][0]["message"]["content"]
            s = await client.get(inst.search_url + "/search", params={"q": "heat pumps", "format": "json"})
            page_url = s.json()["results"][0]["url"]
            assert page_url.startswith(inst.search_url + "/page/")
            assert "<p>" in (await client.get(page_url)).text
        inst.settle()
        assert [c["kind"] for c in inst.search_requests()] == ["searxng", "page"]
        assert load_chain(BENCH)(str(inst.llm_log))["calls"] == 1
        procs = inst.procs
    assert all(p.poll() is not None for p in procs), "servers must stop with the context"


@needs_bench
@pytest.mark.slow
def test_orchestration_benchmark_runs_the_real_path(tmp_path, capsys):
    """quick depth through ChatOpenAI -> fakellm and SearXNG + reader -> fakesearch, tiny latencies."""
    from benchmarks.orchestration import main

    code = main(["--bench", str(BENCH), "--depths", "quick", "--llm-latency", "0.02", "--search-latency", "0.01",
                 "--page-latency", "0.01", "--no-warmup", "--results-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "| quick" in out
    row = json.loads((tmp_path / "orchestration-latest.json").read_text())["rows"][0]
    assert row["status"] == "complete" and row["stop_reason"] == "max_rounds"
    # figures agree with each other and with the servers' logs
    assert row["sequential_llm"] <= row["llm_calls"] == row["agent_reported"]["llm_calls"]
    assert row["searches"] == row["agent_reported"]["searches"] == 3
    assert row["pages_fetched"] >= row["pages_read"] > 0
    assert row["wall_s"] >= row["chain_s"] > 0 and row["wall_over_chain"] >= 1.0
    # fakellm cites an invented [999]; the graph removes it, so every marker left resolves
    assert row["citations_resolved"] == 1.0 and row["sources_cited"] >= 1
    assert set(row["cited_urls"]) <= set(row["read_urls"])
