"""Griffe extension for the API reference: show the docstrings' doctests as code blocks.

The docstrings use Sphinx fields, and their examples are bare doctest blocks after an
``:example:`` field. Markdown would read ``>>>`` as nested block quotes and ``[[0, 1]]`` as a
link, so before mkdocstrings renders a docstring this extension

* wraps every doctest block (from a ``>>>`` line to the next blank line) in a ``pycon`` fence,
* turns the ``:example:`` field into an "Example" heading line and moves it (with everything
  after it) above the first field: the Sphinx parser would otherwise append it to the last
  field's description,
* renders Sphinx cross-reference roles (``:class:`M2M```) as inline code.

Loaded by ``mkdocs.yml`` (mkdocstrings' ``extensions`` option); only the documentation build
uses it.
"""

from __future__ import annotations

import re
from typing import Any

try:
    from griffe import Extension
except ImportError:  # the docs toolchain is not installed: the text helper still works
    Extension = object  # type: ignore[assignment,misc]

_FIELD = re.compile(r"\s*:(param|type|return|returns|rtype|raises|raise|var|ivar|cvar|yield|yields)\b")
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):`~?([^`]+)`")


def doctests_to_markdown(text: str) -> str:
    """Rewrite one docstring for Markdown: fence doctest blocks, render ``:example:`` and roles.

    >>> doc = "Doc.\\n:param x: one\\n:example:\\n\\n>>> [[1, 2]]\\n[[1, 2]]\\n\\nSee :class:`~a.M2M`."
    >>> doctests_to_markdown(doc).splitlines()  # doctest: +NORMALIZE_WHITESPACE
    ['Doc.', '**Example**', '', '```pycon', '>>> [[1, 2]]', '[[1, 2]]', '```', '', 'See `M2M`.', '',
     ':param x: one']
    """
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == ":example:"]
    fields = [i for i, line in enumerate(lines) if _FIELD.match(line)]
    if starts and fields and fields[0] < starts[0]:
        lines = lines[: fields[0]] + lines[starts[0] :] + [""] + lines[fields[0] : starts[0]]
    out: list[str] = []
    fence: str | None = None
    for line in lines:
        stripped = line.strip()
        if fence is not None and not stripped:
            out.append(fence + "```")
            fence = None
        if fence is None and stripped.startswith(">>>"):
            fence = line[: len(line) - len(line.lstrip())]
            out.append(fence + "```pycon")
        if fence is None and stripped == ":example:":
            out.append(line.replace(":example:", "**Example**"))
            continue
        out.append(line if fence is not None else _ROLE.sub(lambda m: f"`{m.group(1).split('.')[-1]}`", line))
    if fence is not None:
        out.append(fence + "```")
    return "\n".join(out)


class DoctestBlocks(Extension):  # type: ignore[misc,valid-type]
    """Apply :func:`doctests_to_markdown` to every docstring griffe loads."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = doctests_to_markdown(obj.docstring.value)
