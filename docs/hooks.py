"""mkdocs hooks: the site's home page is README.md and its changelog CHANGELOG.md, read
from the repository root at build time (one source each), with their links into
``docs/`` made relative to the site."""

from __future__ import annotations

import pathlib
import re
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
FROM_ROOT = {"index.md": "README.md", "changelog.md": "CHANGELOG.md"}


def on_page_read_source(page: Any, config: Any) -> str | None:
    source = FROM_ROOT.get(page.file.src_uri)
    if source is None:
        return None
    text = (ROOT / source).read_text(encoding="utf-8")
    text = text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](changelog.md)")
    return re.sub(r"\]\((?!https?:|#)([^)]*\.(?:py|sh|toml|yml))\)", r"](#)", text)
