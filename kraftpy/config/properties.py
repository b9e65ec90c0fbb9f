"""Java-style ``.properties`` files, the format Kafka's configuration files use.

What is read, following ``java.util.Properties.load``:

- a line whose first non-blank character is ``#`` or ``!`` is a comment; blank lines are skipped;
- a key ends at the first unescaped ``=``, ``:`` or white space; white space around the separator
  is dropped (so ``key=value``, ``key: value`` and ``key value`` are one pair);
- a line ending in an odd number of backslashes continues on the next line, whose leading white
  space is dropped;
- escapes ``\\t \\n \\r \\f \\\\ \\uXXXX`` are decoded, and any other escaped character stands for itself
  (``\\=``, ``\\:``, ``\\ `` and ``\\#`` let keys hold those characters).

Each entry keeps the line it started on, so that a wrong value can be reported as ``file:line``.
"""

from __future__ import annotations

from pathlib import Path

import attrs


class PropertiesSyntaxError(ValueError):
    def __init__(self, message: str, source: str, line: int) -> None:
        super().__init__(f"{source}:{line}: {message}")
        self.source = source
        self.line = line


@attrs.frozen
class Entry:
    key: str
    value: str
    source: str
    line: int


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WHITESPACE = " \t\f"


def _logical_lines(text: str):
    """Yield (first physical line number, logical line) with continuations joined."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i + 1
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1 and i <= len(lines):
                parts.append(line[:-1])
                if i == len(lines):
                    break
                line = lines[i].lstrip(_WHITESPACE)
                i += 1
                continue
            parts.append(line)
            break
        yield start, "".join(parts)


def _unescape(s: str, source: str, line: int) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(s):
            break
        c = s[i]
        if c == "u":
            digits = s[i + 1 : i + 5]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesSyntaxError(f"malformed \\u escape: \\u{digits}", source, line)
            out.append(chr(int(digits, 16)))
            i += 5
            continue
        out.append(_ESCAPES.get(c, c))
        i += 1
    return "".join(out)


def _split(logical: str) -> tuple[str, str]:
    """Split a logical line into raw (still escaped) key and value."""
    i = 0
    n = len(logical)
    while i < n:
        c = logical[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WHITESPACE:
            break
        i += 1
    key = logical[:i]
    rest = logical[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        # One separator character may follow white space ("key = value").
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str, source: str = "<string>") -> list[Entry]:
    """Parse properties text into entries in file order (a repeated key appears twice)."""
    entries = []
    for line_no, logical in _logical_lines(text):
        raw_key, raw_value = _split(logical)
        key = _unescape(raw_key, source, line_no)
        value = _unescape(raw_value, source, line_no)
        entries.append(Entry(key, value, source, line_no))
    return entries


def load_properties(path: str | Path) -> list[Entry]:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PropertiesSyntaxError(f"cannot read: {exc.strerror}", str(path), 0) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # Java's historical encoding for .properties
    return parse_properties(text, str(path))


def _escape(s: str, is_key: bool) -> str:
    out = []
    for i, c in enumerate(s):
        if c == "\\":
            out.append("\\\\")
        elif c in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[c])
        elif c in "=:#!" and (is_key or i == 0):
            out.append("\\" + c)
        elif c == " " and (is_key or i == 0):
            out.append("\\ ")
        else:
            out.append(c)
    return "".join(out)


def format_properties(pairs: dict[str, str] | list[tuple[str, str]], header: str | None = None) -> str:
    """Write pairs in a form `parse_properties` reads back exactly."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    lines = [f"# {line}" for line in header.splitlines()] if header else []
    lines += [f"{_escape(k, True)}={_escape(v, False)}" for k, v in items]
    return "\n".join(lines) + "\n"
