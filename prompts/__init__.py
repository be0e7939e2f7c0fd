"""Prompt templates as editable markdown files.

Each file holds a system part and a user part split by a line `<!-- user -->`; `$name` placeholders
are filled by `render`. Set DEEP_RESEARCH_PROMPTS_DIR to a folder with files of the same names to
use edited copies without touching the package (files missing there fall back to these).
"""

from __future__ import annotations

import os
from pathlib import Path
from string import Template

HERE = Path(__file__).parent
SPLIT = "<!-- user -->"


def prompt_path(name: str) -> Path:
    override = os.environ.get("DEEP_RESEARCH_PROMPTS_DIR")
    if override and (Path(override) / f"{name}.md").is_file():
        return Path(override) / f"{name}.md"
    return HERE / f"{name}.md"


def render(name: str, **values: object) -> tuple[str, str]:
    """(system, user) text of prompt `name` with `$placeholders` filled."""
    text = prompt_path(name).read_text(encoding="utf-8")
    system, _, user = text.partition(SPLIT)
    # the leading comment block documents the placeholders for editors; models need not see it
    system = system.split("-->", 1)[1] if system.lstrip().startswith("<!--") else system
    fill = {k: str(v) for k, v in values.items()}
    return Template(system.strip()).safe_substitute(fill), Template(user.strip()).safe_substitute(fill)


def sections(name: str) -> dict[str, str]:
    """The `## heading` sections of a prompt file as {heading: text}."""
    text = prompt_path(name).read_text(encoding="utf-8")
    out: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return {k: " ".join(v.split()) for k, v in out.items()}
