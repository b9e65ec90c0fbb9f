"""A parser for Kafka's `sasl.jaas.config` strings (Kafka's JaasConfig), and PLAIN users from them.

Grammar, as Kafka's StreamTokenizer reads it::

    config  = entry+
    entry   = <login module class> <flag> (<key> "=" <value>)* ";"
    flag    = required | requisite | sufficient | optional        (any case)
    value   = <word> | "double-quoted" | 'single-quoted'            (\\n \\t \\\\ \\" \\' escapes)
    word    = letters, digits and . - _ $ (non-ASCII letters too)

with `//` and `/* */` comments and free whitespace. A listener's config (e.g.
`listener.name.sasl_plaintext.plain.sasl.jaas.config`) holds exactly one entry; for PLAIN its
`user_<name>="<password>"` options are the users a broker accepts.
"""

from __future__ import annotations

import attrs

CONTROL_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


class JaasConfigError(ValueError):
    """A JAAS config that cannot be parsed; the message is one line and never holds a value."""


@attrs.frozen(repr=False)
class JaasEntry:
    login_module: str
    control_flag: str  # lower case
    options: dict[str, str]

    def __repr__(self) -> str:  # options hold passwords
        return f"JaasEntry({self.login_module!r}, {self.control_flag!r}, keys={sorted(self.options)})"


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in ".-_$"


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs; kind is "word", "quoted" or the punctuation character itself."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise JaasConfigError("unterminated /* comment in JAAS config")
            i = end + 2
        elif ch in "\"'":
            value, i = _quoted(text, i)
            out.append(("quoted", value))
        elif _is_word_char(ch):
            start = i
            while i < n and _is_word_char(text[i]):
                i += 1
            out.append(("word", text[start:i]))
        else:
            out.append((ch, ch))
            i += 1
    return out


def _quoted(text: str, i: int) -> tuple[str, int]:
    quote = text[i]
    out = []
    i += 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    raise JaasConfigError("unterminated quoted value in JAAS config")


def parse_jaas_config(text: str) -> list[JaasEntry]:
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    i = 0

    def take() -> tuple[str, str] | None:
        nonlocal i
        if i >= len(tokens):
            return None
        i += 1
        return tokens[i - 1]

    while (tok := take()) is not None:
        if tok[0] != "word":
            raise JaasConfigError(f"expected a login module name in JAAS config, got {tok[1]!r}")
        module = tok[1]
        flag_tok = take()
        if flag_tok is None or flag_tok[0] == ";":
            raise JaasConfigError("Login module control flag not specified in JAAS config")
        if flag_tok[0] != "word" or flag_tok[1].lower() not in CONTROL_FLAGS:
            raise JaasConfigError(f"Invalid login module control flag '{flag_tok[1]}' in JAAS config")
        options: dict[str, str] = {}
        while (tok := take()) is not None and tok[0] != ";":
            if tok[0] not in ("word", "quoted"):
                raise JaasConfigError(f"expected an option name in JAAS config, got {tok[1]!r}")
            key = tok[1]
            eq, value = take(), take()
            if eq is None or eq[0] != "=" or value is None or value[0] not in ("word", "quoted"):
                raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = value[1]
        if tok is None:
            raise JaasConfigError("JAAS config entry not terminated by semi-colon")
        entries.append(JaasEntry(module, flag_tok[1].lower(), options))
    if not entries:
        raise JaasConfigError("Login module not specified in JAAS config")
    return entries


def parse_listener_jaas_config(text: str) -> JaasEntry:
    """The single entry a `sasl.jaas.config` property must hold."""
    entries = parse_jaas_config(text)
    if len(entries) != 1:
        raise JaasConfigError(f"JAAS config property contains {len(entries)} login modules, should be 1 module")
    return entries[0]


def plain_users(text: str) -> dict[str, str]:
    """The {username: password} table of a PLAIN listener's JAAS config (its `user_NAME` options)."""
    entry = parse_listener_jaas_config(text)
    return {key[len("user_") :]: value for key, value in entry.options.items() if key.startswith("user_") and len(key) > 5}
