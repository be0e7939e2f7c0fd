"""The local-documents provider: BM25 over a folder of .md/.txt/.html files, or over documents
handed in (an evaluation corpus, a notebook's sample set).

Research your own documents with it, and run the whole agent offline. Hits carry the document's
full text as raw_content, so the graph "reads" a local document without fetching anything; their
URLs use the local:// scheme, which the web page reader refuses.
"""

from __future__ import annotations

import asyncio
import html as htmllib
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tools.base import InvalidInput, SearchHit, SearchMetadata, SearchProvider, SearchRequest, SearchResponse
from tools.passages import BM25Index, rank_passages, split_passages

SUFFIXES = {".md", ".markdown", ".txt", ".html", ".htm"}
MAX_FILE_BYTES = 5_000_000
_TAG = re.compile(r"<[^>]+>")
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.S | re.I)
_HEADING = re.compile(r"^#{1,6}\s.*$", re.M)
_SCRIPT = re.compile(r"<(script|style)[^>]*>.*?</\1>", re.S | re.I)


@dataclass
class Document:
    title: str
    text: str
    url: str
    published_date: str | None = None


def _html_to_text(raw: str) -> tuple[str, str]:
    m = _TITLE.search(raw)
    title = htmllib.unescape(m.group(1).strip()) if m else ""
    body = _SCRIPT.sub(" ", raw)
    body = re.sub(r"</(p|div|h\d|li|tr|br)\s*>|<br\s*/?>", "\n\n", body, flags=re.I)
    text = htmllib.unescape(_TAG.sub(" ", body))
    text = "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip())
    return title, text


def load_folder(folder: str | Path) -> list[Document]:
    """Every readable document under folder (recursively), title from a heading or the file name."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InvalidInput(f"corpus folder {str(root)!r} does not exist: pass an existing folder "
                           f"with --corpus or DEEP_RESEARCH_CORPUS", provider="local")
    docs: list[Document] = []
    for path in sorted(root.rglob("*")):
        if path.suffix.lower() not in SUFFIXES or not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        rel = path.relative_to(root).as_posix()
        if path.suffix.lower() in {".html", ".htm"}:
            title, text = _html_to_text(raw)
        else:
            text = raw
            heading = re.search(r"^#\s+(.+)$", raw, re.M)
            title = heading.group(1).strip() if heading else ""
        docs.append(Document(title=title or path.stem.replace("_", " ").replace("-", " "),
                             text=text.strip(), url=f"local://{quote(root.name)}/{quote(rel)}"))
    return docs


class LocalProvider(SearchProvider):
    """Search documents held in memory with BM25 over title and text."""

    name = "local"

    def __init__(self, documents: list[Document]):
        self.documents = [d for d in documents if d.text]
        self._index = BM25Index([f"{d.title}\n{d.text}" for d in self.documents])

    @classmethod
    def from_folder(cls, folder: str | Path) -> "LocalProvider":
        docs = load_folder(folder)
        if not docs:
            raise InvalidInput(f"corpus folder {str(folder)!r} holds no .md, .txt or .html files",
                               provider="local")
        return cls(docs)

    @classmethod
    def from_documents(cls, documents: list[dict | Document]) -> "LocalProvider":
        """Documents as Document or dicts with title, text and optionally url / published_date."""
        docs = []
        for i, d in enumerate(documents):
            if isinstance(d, dict):
                title = str(d.get("title", ""))
                url = d.get("url") or f"local://docs/{i + 1}-{quote(title[:60] or 'doc')}"
                d = Document(title=title, text=str(d.get("text", "")), url=url,
                             published_date=d.get("published_date"))
            docs.append(d)
        return cls(docs)

    async def _search(self, req: SearchRequest) -> SearchResponse:
        # BM25 over a big corpus is CPU work: keep the event loop free
        return await asyncio.to_thread(self._search_sync, req)

    def _search_sync(self, req: SearchRequest) -> SearchResponse:
        start = (req.page - 1) * req.max_results
        best = self._index.top(req.query, start + req.max_results)
        hits = []
        for i, score in best[start:]:
            d = self.documents[i]
            body = _HEADING.sub("", d.text)  # a snippet should be prose, not the title again
            passages = split_passages(body, target_chars=300, max_chars=500)
            snippet = passages[rank_passages(req.query, passages, 1)[0][0]] if passages else ""
            hits.append(SearchHit(title=d.title, url=d.url, content=snippet, score=round(score, 4),
                                  engine=self.name, published_date=d.published_date,
                                  raw_content=d.text))
        return SearchResponse(results=hits, metadata=SearchMetadata(
            query=req.query, total_results=len(best), provider=self.name))
