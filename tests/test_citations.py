"""Citation checking: renumbering, unknown ids, key findings, the source list."""

from __future__ import annotations

from graph.citations import check_citations, render_source_list, split_key_findings


def test_markers_are_renumbered_by_first_use_and_unknown_ones_removed():
    checked = check_citations("A [7]. B [3][7]. C [99]. D [3, 42, 7].", allowed_ids={3, 7})
    assert checked.text == "A [1]. B [2][1]. C. D [2][1]."
    assert checked.order == [7, 3]
    assert sorted(checked.removed) == [42, 99]


def test_no_markers_is_fine():
    checked = check_citations("Nothing cited here.", allowed_ids={1})
    assert checked.text == "Nothing cited here." and checked.order == [] and checked.removed == []


def test_key_findings_are_parsed_with_their_citations():
    report = "Answer [1].\n\n## Key findings\n\n- First thing [1][2].\n* Second [2]\n1. Third\n\n## Other\n\nx"
    body, findings = split_key_findings(report)
    assert findings == [("First thing", [1, 2]), ("Second", [2]), ("Third", [])]
    assert "Key findings" not in body and "## Other" in body


def test_source_list_numbers_match_markers_and_escape_titles():
    text = render_source_list([{"url": "https://a.example/x", "title": "A [draft]", "published_date": "2024-01-02"},
                               {"url": "https://b.example/", "title": ""}])
    assert text.splitlines()[2] == "1. [A (draft)](https://a.example/x) (2024-01-02)"
    assert text.splitlines()[3] == "2. [https://b.example/](https://b.example/)"
