"""Log text is data: the one place that makes report strings safe to show.

Every string in a report may come from a log line or a file name an untrusted job wrote, so
every view passes them through here:

* :func:`escape_controls` -- the sanitizer. C0/C1 controls (ESC, ``\\r``, NUL, DEL, CSI
  0x9B ...), Unicode format characters (bidi overrides and isolates, zero-width spaces, BOM,
  soft hyphen), line/paragraph separators and lone surrogates are written as visible
  escapes (``\\x1b``, ``\\u202e``), so no terminal control sequence and no line break can
  come out of a value. The terminal view uses it for every value and never parses rich
  markup (``[/path/pair.cc:553]`` is text, not a closing tag).
* :func:`md_text` / :func:`md_code` -- Markdown: sanitized, then escaped so a value can
  never open structure (headings, quotes, lists, tables, links, HTML tags, emphasis).
* :func:`json_text` -- JSON stays exact data, but DEL, C1, bidi and zero-width characters
  and lone surrogates are written as ``\\uXXXX`` escapes, so printing the JSON to a terminal
  is safe too and the bytes are always valid UTF-8.
* :func:`map_strings` -- a string-mapping pass over any nested report structure (dicts,
  lists, dataclasses); :meth:`crashscope.report.model.Report.map_strings` applies it to a
  whole report. Redaction (hostnames, IPs, user names) hooks in there: map, then render.
"""

from __future__ import annotations

import dataclasses
import json
import re
from functools import lru_cache
from typing import Any, Callable

import regex

# Every control (Cc: C0, DEL, C1), format character (Cf: bidi embeddings, overrides and
# isolates, zero-width space/joiners, BOM, soft hyphen, tag characters, ...), line and
# paragraph separator (Zl, Zp) and surrogate (Cs: lone ones come from surrogateescape
# decoding), plus the noncharacters U+FFFE/U+FFFF.
_UNSAFE = regex.compile(r"[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}\uFFFE\uFFFF]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m: Any) -> str:
    c = m.group(0)
    if c in _NAMED:
        return _NAMED[c]
    o = ord(c)
    if o < 0x100:
        return f"\\x{o:02x}"
    if o < 0x10000:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def escape_controls(value: Any, limit: int | None = None) -> str:
    """``value`` as one line of display-safe text (see the module doc).

    ``limit`` cuts the text (before escaping, so huge lines cost nothing) and marks the cut
    with an ellipsis. ``None`` becomes ``""``; other non-strings go through ``str``.
    """
    if value is None:
        return ""
    s = value if isinstance(value, str) else str(value)
    cut = False
    if limit is not None and len(s) > limit:
        s, cut = s[: max(0, limit - 1)], True
    s = _UNSAFE.sub(_escape_char, s)
    return s + "…" if cut else s


def is_display_safe(text: str, *, allow: str = "\n") -> bool:
    """True when ``text`` holds no character :func:`escape_controls` would escape, except
    those in ``allow`` (tests and callers that assemble multi-line output)."""
    return all(c in allow for c in _UNSAFE.findall(text))


# --- Markdown -----------------------------------------------------------------------------

# Every ASCII punctuation character may be backslash-escaped in CommonMark; these are the
# ones that can start structure anywhere in a line (emphasis, code, links, images, HTML,
# entities, table cells, strikethrough, headings).
_MD_INLINE = re.compile(r"([\\`*_\[\]<>|#~&!{}])")
# At the start of a block: list markers, quotes, thematic breaks, ordered lists, setext.
_MD_LEADING = re.compile(r"^(\s*)([-+=>.:]|\d+(?=[.)]))")
_AUTOLINK = re.compile(r"(?i)(://|www\.)")


def md_text(value: Any, limit: int | None = None) -> str:
    """Sanitized, Markdown-inert prose (a value inside a sentence, list item or table cell)."""
    s = escape_controls(value, limit)
    s = _MD_INLINE.sub(r"\\\1", s)
    s = _AUTOLINK.sub(lambda m: "\\:\\/\\/" if m.group(1) == "://" else m.group(1)[:3] + "\\.", s)
    return _MD_LEADING.sub(lambda m: m.group(1) + "\\" + m.group(2), s)


def md_code(value: Any, limit: int | None = None, *, table: bool = False) -> str:
    """A log line as a Markdown code span: literal text, readable, one line.

    The fence is longer than any run of backticks inside; ``table=True`` also escapes ``|``
    (GFM splits table cells on pipes even inside code spans)."""
    s = escape_controls(value, limit)
    if not s:
        return ""
    if table:
        s = s.replace("|", "\\|")
    longest = max((len(r) for r in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ") and s.strip()) else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def md_fence(value: Any, limit: int | None = None) -> list[str]:
    """A log line as a fenced code block (three lines), fence longer than any backtick run."""
    s = escape_controls(value, limit)
    longest = max((len(r) for r in re.findall(r"`+", s)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", s, fence]


# --- JSON ---------------------------------------------------------------------------------

# Characters json.dumps(ensure_ascii=False) leaves raw but a terminal may act on (DEL, C1)
# or that reorder/hide text (format characters, separators), and lone surrogates (not
# encodable). json.dumps already escapes C0.
_JSON_UNSAFE = regex.compile(r"[\x7f-\x9f\p{Cf}\p{Cs}\p{Zl}\p{Zp}\uFFFE\uFFFF]")


def _json_escape(m: Any) -> str:
    c = m.group(0)
    o = ord(c)
    if o < 0x10000:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


def json_text(text: str) -> str:
    """Post-process ``json.dumps(..., ensure_ascii=False)`` output: same JSON value, but the
    characters above are ``\\uXXXX`` escapes. Safe because JSON text outside strings is
    ASCII, so every such character sits inside a string literal."""
    if text.isascii():  # every character it escapes is above 0x7e (an O(1) test of a str)
        return text
    return _JSON_UNSAFE.sub(_json_escape, text)


_SCALARS = (str, int, float, type(None))  # bool is an int
_PLAIN = frozenset((str, int, float, bool, type(None)))


@lru_cache(maxsize=64)
def _flat_encoder(level: int) -> Callable[[Any], str]:
    """json's C encoder (it serves only calls without ``indent``) writing a container's
    items one to a line at ``level``: what ``indent=2`` writes between them."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is None:  # a Python without the C part: json's own encoder
        return json.JSONEncoder(ensure_ascii=False, separators=(",\n" + "  " * level, ": ")).encode
    e = json.JSONEncoder(ensure_ascii=False)
    enc = c_make_encoder(None, e.default, json.encoder.encode_basestring, None, ": ", ",\n" + "  " * level, False, False, True)
    return lambda o: "".join(enc(o, 0))


def _flat(values: Any) -> bool:
    """Every value a scalar or an empty container (which json writes as ``{}``, ``[]``)."""
    return all(type(v) in _PLAIN or isinstance(v, _SCALARS) or (isinstance(v, (dict, list, tuple)) and not v) for v in values)


def json_dumps(obj: Any) -> str:
    """``json.dumps(obj, indent=2, ensure_ascii=False)``, the same text, faster: json's
    indenting encoder is pure Python; here every container whose items are scalars (or
    empty) is written by json's C encoder and only the containers above those are walked
    in Python (a 16,384-rank report: 53k such dicts, 10.7 MB)."""
    out: list[str] = []
    _dump(obj, 0, out)
    return "".join(out)


def _dump(o: Any, level: int, out: list[str]) -> None:
    t = type(o)
    if t is dict and o:
        inner = "  " * (level + 1)
        if _flat(o.values()):
            out.append("{\n" + inner + _flat_encoder(level + 1)(o)[1:-1] + "\n" + "  " * level + "}")
            return
        if any(type(k) is not str for k in o):  # keys json converts (numbers, None): json itself
            out.append(json.dumps(o, indent=2, ensure_ascii=False).replace("\n", "\n" + "  " * level))
            return
        key = json.encoder.encode_basestring
        sep = "{\n" + inner
        for k, v in o.items():
            out.append(sep + key(k) + ": ")
            _dump(v, level + 1, out)
            sep = ",\n" + inner
        out.append("\n" + "  " * level + "}")
    elif (t is list or t is tuple) and o:
        inner = "  " * (level + 1)
        if _flat(o):
            out.append("[\n" + inner + _flat_encoder(level + 1)(o)[1:-1] + "\n" + "  " * level + "]")
            return
        sep = "[\n" + inner
        for v in o:
            out.append(sep)
            _dump(v, level + 1, out)
            sep = ",\n" + inner
        out.append("\n" + "  " * level + "]")
    elif t in _PLAIN or (t is dict or t is list or t is tuple):  # a scalar, an empty container
        out.append(_flat_encoder(0)(o))
    else:
        # a subclass of dict, list, str or a number, anything json calls ``default`` for:
        # json itself, its text indented to this level (a JSON text has line breaks only
        # between tokens, never inside a string)
        out.append(json.dumps(o, indent=2, ensure_ascii=False).replace("\n", "\n" + "  " * level))


# --- the string-mapping pass --------------------------------------------------------------


def map_strings(obj: Any, fn: Callable[[str], str], *, keys: bool = False) -> Any:
    """A copy of ``obj`` with ``fn`` applied to every string in it (dict values, list and
    tuple items, dataclass fields; dict keys too with ``keys=True``). Numbers, booleans and
    ``None`` are kept as they are."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {(fn(k) if keys and isinstance(k, str) else k): map_strings(v, fn, keys=keys) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_strings(v, fn, keys=keys) for v in obj]
    if isinstance(obj, tuple):
        return tuple(map_strings(v, fn, keys=keys) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: map_strings(getattr(obj, f.name), fn, keys=keys) for f in dataclasses.fields(obj) if f.init}
        return dataclasses.replace(obj, **changes)
    return obj
