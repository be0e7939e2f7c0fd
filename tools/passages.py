"""Lexical ranking with BM25 (bm25s): passages of read pages against a sub-query, and documents of a
local corpus against a search. No model weights, no network: ~1 ms a query on thousands of texts.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from dataclasses import dataclass

import bm25s

# bm25s sets its own logger to DEBUG on import and logs every index build; keep it quiet unless
# someone asks for its logs explicitly
logging.getLogger("bm25s").setLevel(logging.WARNING)

_PARA = re.compile(r"\n\s*\n")
_WORD = re.compile(r"\w+", re.UNICODE)
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # bm25s.tokenize's default pattern
_STOPWORDS = frozenset(bm25s.stopwords.STOPWORDS_EN)  # what bm25s.tokenize(stopwords="en") drops
K1, B = 1.5, 0.75  # bm25s's defaults (its "lucene" variant)


def _tokens(texts: list[str]) -> list[list[str]]:
    out = bm25s.tokenize(texts, stopwords="en", show_progress=False, return_ids=False)
    return [list(t) for t in out]


@dataclass
class BM25Index:
    """A BM25 index over a fixed list of texts."""

    texts: list[str]

    def __post_init__(self) -> None:
        self._retriever = bm25s.BM25()
        self._vocab: set[str] = set()
        tokens = _tokens(self.texts) if self.texts else []
        for t in tokens:
            self._vocab.update(t)
        if self._vocab:
            # bm25s cannot index documents with no tokens at all; a placeholder keeps positions aligned
            self._retriever.index([t or ["\u2205"] for t in tokens], show_progress=False)

    def scores(self, query: str) -> list[float]:
        """One score per text, in input order; 0.0 where no query word occurs."""
        q = [w for w in _tokens([query])[0] if w in self._vocab] if self._vocab else []
        if not q:
            return [0.0] * len(self.texts)
        return [float(s) for s in self._retriever.get_scores(q)]

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Indices and scores of the best k texts with a positive score, best first."""
        scored = [(i, s) for i, s in enumerate(self.scores(query)) if s > 0]
        scored.sort(key=lambda p: (-p[1], p[0]))
        return scored[:k]


def split_passages(text: str, target_chars: int = 700, max_chars: int = 1200) -> list[str]:
    """Paragraph-aligned passages of roughly target_chars; long paragraphs are cut at sentences."""
    paras = [p.strip() for p in _PARA.split(text) if p.strip()]
    out: list[str] = []
    buf = ""
    for p in paras:
        while len(p) > max_chars:  # a wall of text: cut at the last sentence end before the limit
            cut = max(p.rfind(". ", 0, max_chars), p.rfind("\n", 0, max_chars))
            cut = cut + 1 if cut > target_chars // 2 else max_chars
            if buf:
                out.append(buf)
                buf = ""
            out.append(p[:cut].strip())
            p = p[cut:].strip()
        if buf and len(buf) + len(p) + 2 > target_chars:
            out.append(buf)
            buf = p
        else:
            buf = f"{buf}\n\n{p}" if buf else p
    if buf:
        out.append(buf)
    return out


def small_bm25_scores(query: str, texts: list[str]) -> list[float]:
    """BM25 scores of a few texts (one page's passages) against a query, as BM25Index computes them
    (same tokens, stopwords, Lucene IDF, k1 and b), in plain Python: building a bm25s index costs
    ~0.5 ms of fixed overhead, which is most of a page's ranking and lands on every round's pages."""
    docs = [[w for w in _TOKEN.findall(t.lower()) if w not in _STOPWORDS] or ["\u2205"] for t in texts]
    counts = [Counter(d) for d in docs]
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    out = [0.0] * n
    for word in (w for w in _TOKEN.findall(query.lower()) if w not in _STOPWORDS):
        df = sum(word in c for c in counts)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, c in enumerate(counts):
            tf = c.get(word, 0)
            if tf:
                out[i] += idf * tf / (K1 * (1 - B + B * len(docs[i]) / avg) + tf)
    return out


def rank_passages(query: str, passages: list[str], k: int) -> list[tuple[int, float]]:
    """The k passages most relevant to the query. When no word matches (a query in other words
    than the page), keep the page's opening passages rather than nothing: they usually say what
    the page is about."""
    if not passages:
        return []
    scored = [(i, s) for i, s in enumerate(small_bm25_scores(query, passages)) if s > 0]
    scored.sort(key=lambda p: (-p[1], p[0]))
    if scored:
        return scored[:k]
    return [(i, 0.0) for i in range(min(k, len(passages)))]


def word_count(text: str) -> int:
    return len(_WORD.findall(text))
