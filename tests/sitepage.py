"""A page of the built site as the report's tests read it: its elements, its text and its embedded data."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any


class Page(HTMLParser):
    """The parts of a page the tests look at: every element's tag and attributes, in order, and the data."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self.data: Any = None
        self._in_data = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        self._in_data = tag == "script" and a.get("id") == "site-data"

    def handle_endtag(self, tag: str) -> None:
        self._in_data = False

    def handle_data(self, data: str) -> None:
        if self._in_data:
            self.data = json.loads(data)
        else:
            self.texts.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.texts).split())


def page(root: Path, rel: str) -> Page:
    return Page((root / rel).read_text(encoding="utf-8"))
