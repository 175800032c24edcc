"""Splitting a policy turn into its top-level tag blocks: the one tag scanner the env grammars share."""

from __future__ import annotations

import re

Block = tuple[str, str, int, int]
"""(tag, inner text, start of the opening tag, end of the closing tag)."""


def tag_blocks(text: str, tag_pattern: re.Pattern[str]) -> list[Block] | tuple[str, str]:
    """The blocks of ``text`` for tags matched by ``tag_pattern`` (groups: ``/`` or empty, tag name), or
    ``(reason, message)`` when tags nest or do not balance; each env turns that into its own ParseError.

    >>> tag_blocks("<a>x</a> <b>y</b>", re.compile(r"<(/?)(a|b)>"))
    [('a', 'x', 0, 8), ('b', 'y', 9, 17)]
    >>> tag_blocks("<a><b>", re.compile(r"<(/?)(a|b)>"))[0]
    'nested_tags'
    """
    blocks: list[Block] = []
    open_tag: tuple[str, int, int] | None = None
    for match in tag_pattern.finditer(text):
        closing, tag = match.group(1) == "/", match.group(2)
        if not closing:
            if open_tag is not None:
                return "nested_tags", f"<{tag}> opened inside <{open_tag[0]}>; tags must not nest."
            open_tag = (tag, match.start(), match.end())
        elif open_tag is None or open_tag[0] != tag:
            return "unbalanced_tags", f"</{tag}> has no matching <{tag}>."
        else:
            blocks.append((tag, text[open_tag[2] : match.start()], open_tag[1], match.end()))
            open_tag = None
    if open_tag is not None:
        return "unbalanced_tags", f"<{open_tag[0]}> is never closed."
    return blocks
