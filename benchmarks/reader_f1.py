"""Score the page reader's HTML extraction on the scrapinghub article-extraction benchmark.

Runs `tools.reader.extract` (the very function read_page uses for HTML) on every page and compares
its text with the annotated article body using the benchmark's own metric (evaluate.py upstream):
\\w+ tokens, 4-token shingles counted with multiplicity, per-page tp/fp/fn normalised to sum 1,
precision and recall averaged over pages, F1 from those two averages.

The reader returns markdown; before scoring, markdown's backslash escapes (``\\_``, ``\\*``) are
undone, since they are rendering, not content (an escaped underscore would split one token in two).

    uv run python benchmarks/reader_f1.py [PATH_TO_article_extraction] [--limit N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tools.reader import extract  # noqa: E402

DEFAULT_DATA = REPO / ".." / "shared" / "evaldata" / "article_extraction"
_TOKEN = re.compile(r"\w+", re.UNICODE | re.MULTILINE | re.IGNORECASE | re.DOTALL)
_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>~|])")


def markdown_to_plain(md: str) -> str:
    return _MD_ESCAPE.sub(r"\1", md)


def shingles(text: str, n: int = 4) -> Counter:
    tokens = _TOKEN.findall(text or "")
    return Counter(tuple(tokens[i:i + n]) for i in range(max(1, len(tokens) - n + 1)) if tokens[i:i + n])


def tp_fp_fn(true: str, pred: str) -> tuple[float, float, float]:
    t, p = shingles(true), shingles(pred)
    tp = sum((t & p).values())
    fp = sum((p - t).values())
    fn = sum((t - p).values())
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total else (0.0, 0.0, 0.0)


def precision(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    return 0.0 if tp == fp == 0 else tp / (tp + fp)


def recall(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    return 0.0 if tp == fn == 0 else tp / (tp + fn)


def summarise(rows: list[tuple[float, float, float]]) -> dict[str, float]:
    p = statistics.mean(precision(*r) for r in rows if r[0] + r[1] > 0)
    r = statistics.mean(recall(*r) for r in rows if r[0] + r[2] > 0)
    return {"precision": p, "recall": r, "f1": 2 * p * r / (p + r)}


def run(data: Path, limit: int | None = None) -> dict:
    truth = json.loads((data / "ground-truth.json").read_text(encoding="utf-8"))
    items = sorted(truth.items())[:limit]
    rows, pages, elapsed = [], {}, 0.0
    for page_id, item in items:
        with gzip.open(data / "html" / f"{page_id}.html.gz", "rt", encoding="utf-8") as f:
            html = f.read()
        t0 = time.perf_counter()
        _, _, text = extract(html, item.get("url"))
        elapsed += time.perf_counter() - t0
        row = tp_fp_fn(item.get("articleBody", ""), markdown_to_plain(text))
        rows.append(row)
        pages[page_id] = {"precision": precision(*row), "recall": recall(*row)}
    return {**summarise(rows), "pages": len(rows), "seconds_per_page": elapsed / max(1, len(rows)),
            "per_page": pages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA, help="article_extraction folder")
    ap.add_argument("--limit", type=int, default=None, help="score only the first N pages")
    args = ap.parse_args()
    if not (args.data / "ground-truth.json").is_file():
        sys.exit(f"no ground-truth.json under {args.data}: pass the article_extraction folder")
    import trafilatura

    result = run(args.data, args.limit)
    print(f"{'extractor':<28}{'precision':>10}{'recall':>10}{'F1':>8}{'pages':>7}{'s/page':>9}")
    print(f"{'tools.reader.extract':<28}{result['precision']:>10.4f}{result['recall']:>10.4f}"
          f"{result['f1']:>8.4f}{result['pages']:>7}{result['seconds_per_page']:>9.4f}")
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = out_dir / f"reader_f1-{stamp}.json"
    out.write_text(json.dumps({"benchmark": "article_extraction", "trafilatura": trafilatura.__version__,
                               "created": stamp, **result}, indent=2))
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
