"""The ``condition`` mini-language of rule ``match`` blocks: selection names combined with
``and``, ``or``, ``not`` and parentheses (Sigma's core subset), parsed once at load time."""

from __future__ import annotations

from typing import Union

import regex

Node = Union[str, tuple]  # a selection name, ("not", n), ("and", a, b), ("or", a, b)

_TOKEN = regex.compile(r"\s*(?:(\()|(\))|([A-Za-z_][\w-]*))")


class ConditionError(ValueError):
    pass


def tokenize(text: str) -> list[str]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ConditionError(f"unexpected character {text[pos]!r} at column {pos + 1}")
        out.append(m.group(m.lastindex))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def parse(text: str, names: set[str] | frozenset[str]) -> Node:
    """Parse ``text``; every bare word that is not an operator must be in ``names``."""
    toks = tokenize(text)
    if not toks:
        raise ConditionError("empty condition")
    pos = 0

    def peek() -> str | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> str:
        nonlocal pos
        tok = toks[pos]
        pos += 1
        return tok

    def expr() -> Node:
        node = term()
        while peek() == "or":
            take()
            node = ("or", node, term())
        return node

    def term() -> Node:
        node = factor()
        while peek() == "and":
            take()
            node = ("and", node, factor())
        return node

    def factor() -> Node:
        tok = peek()
        if tok is None:
            raise ConditionError("condition ends too early")
        if tok == "not":
            take()
            return ("not", factor())
        if tok == "(":
            take()
            node = expr()
            if peek() != ")":
                raise ConditionError("missing ')'")
            take()
            return node
        if tok in ("and", "or", ")"):
            raise ConditionError(f"unexpected {tok!r}")
        take()
        if tok not in names:
            raise ConditionError(f"unknown selection {tok!r} (known: {', '.join(sorted(names))})")
        return tok

    node = expr()
    if pos != len(toks):
        raise ConditionError(f"unexpected {toks[pos]!r} after the end of the expression")
    return node


def names_in(node: Node) -> set[str]:
    if isinstance(node, str):
        return {node}
    return set().union(*(names_in(n) for n in node[1:]))
