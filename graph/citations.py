"""Citations: the writer cites by registry id only; code checks every marker and renders sources.

Markers are renumbered 1..k in order of first use, so the report reads [1], [2], [3] whatever ids
the registry handed out, and result.sources uses the same numbers. A marker whose id was not among
the sources the writer was given is removed and counted: it cannot point at a page we read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from graph.state import Source

MARKER = re.compile(r"\[(\d{1,4}(?:\s*,\s*\d{1,4})*)\]")
_KEY_FINDINGS = re.compile(r"^#{1,3}\s*Key findings\s*$", re.I | re.M)


@dataclass
class CheckedReport:
    text: str  # report body with markers renumbered; no source list yet
    order: list[int] = field(default_factory=list)  # registry ids in citation order (new id = index+1)
    removed: list[int] = field(default_factory=list)  # unknown registry ids dropped from the text


def check_citations(report: str, allowed_ids: set[int]) -> CheckedReport:
    """Renumber known markers by first use and strip unknown ones (also inside [1, 7] groups)."""
    order: list[int] = []
    removed: list[int] = []

    def renumber(m: re.Match) -> str:
        out = []
        for part in m.group(1).split(","):
            sid = int(part)
            if sid not in allowed_ids:
                removed.append(sid)
                continue
            if sid not in order:
                order.append(sid)
            out.append(f"[{order.index(sid) + 1}]")
        return "".join(out)

    text = MARKER.sub(renumber, report)
    text = re.sub(r"[ \t]+([.,;:])", r"\1", text)  # "claim [99]." became "claim ." above
    return CheckedReport(text=text.strip(), order=order, removed=removed)


def split_key_findings(report: str) -> tuple[str, list[tuple[str, list[int]]]]:
    """The report without its '## Key findings' section, and that section's bullets with ids."""
    m = _KEY_FINDINGS.search(report)
    if not m:
        return report, []
    head, tail = report[: m.start()], report[m.end():]
    nxt = re.search(r"^#{1,3}\s+\S", tail, re.M)
    section, rest = (tail[: nxt.start()], tail[nxt.start():]) if nxt else (tail, "")
    findings = []
    for line in section.splitlines():
        line = line.strip()
        if not re.match(r"^([-*+]|\d+[.)])\s+", line):
            continue
        text = re.sub(r"^([-*+]|\d+[.)])\s+", "", line)
        ids = [int(x) for g in MARKER.findall(text) for x in g.split(",")]
        clean = MARKER.sub("", text).strip().rstrip(".").strip()
        if clean:
            findings.append((clean, list(dict.fromkeys(ids))))
    body = (head.rstrip() + ("\n\n" + rest.strip() if rest.strip() else "")).strip()
    return body, findings


def render_source_list(cited: list[Source]) -> str:
    """The numbered source list appended to the report; numbers match the markers."""
    if not cited:
        return ""
    lines = ["## Sources", ""]
    for n, s in enumerate(cited, 1):
        title = (s.get("title") or s["url"]).replace("]", ")").replace("[", "(")
        date = f" ({s['published_date']})" if s.get("published_date") else ""
        lines.append(f"{n}. [{title}]({s['url']}){date}")
    return "\n".join(lines)
