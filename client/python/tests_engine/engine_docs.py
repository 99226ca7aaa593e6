"""The engine configurations docs/engines.md gives, read from that page itself, so the engine
tests load exactly what a user copies. A configuration is the first fenced block of the given language
after a heading; its placeholders (``http://127.0.0.1:9080``, ``kvcache``, ``<access key>``,
``<secret key>``) are replaced with the test stack's endpoint, bucket and key."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict

PAGE = Path(__file__).resolve().parents[3] / "docs" / "engines.md"
PLACEHOLDERS = {"endpoint": "http://127.0.0.1:9080", "bucket": "kvcache", "access_key": "<access key>", "secret_key": "<secret key>"}


def block(heading: str, language: str) -> str:
    """The first ```language block after the heading line ``heading`` (without its #s)."""
    text = PAGE.read_text()
    found = re.search(rf"^#+ {re.escape(heading)}\s*$", text, re.MULTILINE)
    if found is None:
        raise LookupError(f"docs/engines.md has no heading {heading!r}")
    fenced = re.search(rf"^```{re.escape(language)}\n(.*?)^```", text[found.end():], re.MULTILINE | re.DOTALL)
    if fenced is None:
        raise LookupError(f"docs/engines.md has no ```{language} block after {heading!r}")
    return fenced.group(1)


def filled(heading: str, language: str, values: Dict[str, str]) -> str:
    """The block with each placeholder replaced by ``values`` (keys of PLACEHOLDERS); every
    placeholder must be present, so a page that drifts from the tests fails them."""
    text = block(heading, language)
    for name, placeholder in PLACEHOLDERS.items():
        if name in values:
            if placeholder not in text:
                raise LookupError(f"docs/engines.md's {heading!r} block lost its {placeholder!r}")
            text = text.replace(placeholder, values[name])
    return text
