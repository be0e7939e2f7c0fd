"""The local-documents provider: BM25 over a folder of .md/.txt/.html files."""

from __future__ import annotations

import pytest

from graph.testing import sample_corpus_dir
from tools.base import InvalidInput
from tools.providers.local import LocalProvider


@pytest.fixture(scope="module")
def provider() -> LocalProvider:
    return LocalProvider.from_folder(sample_corpus_dir())


async def test_finds_the_relevant_document_first(provider):
    resp = await provider.search("refrigerant propane global warming potential", max_results=3)
    assert resp.results[0].url.endswith("emissions.md")
    assert resp.metadata.provider == "local" and resp.metadata.query.startswith("refrigerant")
    hit = resp.results[0]
    assert hit.raw_content and "R290" in hit.raw_content and not hit.content.startswith("#")
    assert [h.score for h in resp.results] == sorted((h.score for h in resp.results), reverse=True)


async def test_paging_and_unknown_words(provider):
    first = await provider.search("heat pump", max_results=2)
    second = await provider.search("heat pump", max_results=2, page=2)
    assert {h.url for h in first.results}.isdisjoint(h.url for h in second.results)
    assert (await provider.search("zyxwvut qqqq")).results == []


async def test_reads_html_and_text(tmp_path):
    (tmp_path / "a.html").write_text("<html><head><title>Tide tables</title><script>var x=1;</script></head>"
                                     "<body><p>Spring tides follow the new moon.</p></body></html>")
    (tmp_path / "b.txt").write_text("Neap tides come at quarter moons.")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    p = LocalProvider.from_folder(tmp_path)
    assert len(p.documents) == 2
    hit = (await p.search("spring tides moon")).results[0]
    assert hit.title == "Tide tables" and "var x" not in hit.raw_content


def test_bad_folders_say_what_to_do(tmp_path):
    with pytest.raises(InvalidInput, match="does not exist"):
        LocalProvider.from_folder(tmp_path / "missing")
    with pytest.raises(InvalidInput, match="no .md, .txt or .html"):
        LocalProvider.from_folder(tmp_path)


async def test_query_is_validated(provider):
    with pytest.raises(InvalidInput, match="query is empty"):
        await provider.search("   ")
    with pytest.raises(InvalidInput, match="limit is 400"):
        await provider.search("x" * 401)
