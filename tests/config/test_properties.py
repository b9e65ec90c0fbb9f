"""The .properties reader against java.util.Properties rules."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.config.properties import (
    PropertiesSyntaxError,
    format_properties,
    load_properties,
    parse_properties,
)


def pairs(text):
    return [(e.key, e.value) for e in parse_properties(text)]


def test_comments_with_hash_and_bang_and_blank_lines_are_skipped():
    assert pairs("# one\n! two\n\n   # indented\na=1\n") == [("a", "1")]


@pytest.mark.parametrize("line", ["key=value", "key: value", "key value", "key = value", "key\t:\tvalue",
                                  "   key=value"])
def test_separators(line):
    assert pairs(line) == [("key", "value")]


def test_empty_value_and_key_alone():
    assert pairs("a=\nb\n") == [("a", ""), ("b", "")]


def test_value_keeps_later_separators_and_trailing_text():
    assert pairs("listeners=PLAINTEXT://:9092,CONTROLLER://:9093") == [
        ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093")]
    assert pairs("a==b") == [("a", "=b")]


def test_backslash_continuation_drops_leading_whitespace():
    text = "controller.quorum.voters=1@h:9093,\\\n    2@h:9094,\\\n    3@h:9095\nnext=1\n"
    assert pairs(text) == [("controller.quorum.voters", "1@h:9093,2@h:9094,3@h:9095"), ("next", "1")]


def test_even_backslashes_do_not_continue():
    assert pairs("a=x\\\\\nb=y") == [("a", "x\\"), ("b", "y")]


def test_continuation_on_last_line():
    assert pairs("a=x\\") == [("a", "x")]


def test_escapes_in_keys_and_values():
    assert pairs("a\\=b\\:c\\ d=\\t\\u0041\\q") == [("a=b:c d", "\tAq")]


def test_malformed_unicode_escape_names_the_line():
    with pytest.raises(PropertiesSyntaxError) as err:
        parse_properties("ok=1\nbad=\\u12G4\n", "server.properties")
    assert err.value.line == 2
    assert "server.properties:2" in str(err.value)


def test_entries_remember_their_first_line():
    entries = parse_properties("# c\na=1\\\n  2\nb=3\n", "f")
    assert [(e.key, e.line) for e in entries] == [("a", 2), ("b", 4)]


def test_repeated_key_is_kept_in_order():
    assert pairs("a=1\na=2") == [("a", "1"), ("a", "2")]


def test_latin1_file_is_read(tmp_path):
    path = tmp_path / "x.properties"
    path.write_bytes("name=caf\xe9\n".encode("latin-1"))
    assert [(e.key, e.value) for e in load_properties(path)] == [("name", "caf\xe9")]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(PropertiesSyntaxError, match="cannot read"):
        load_properties(tmp_path / "nope.properties")


keys = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x0b\x1c\x1d\x1e\x85\u2028\u2029"),
               min_size=1, max_size=20)
values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x0b\x1c\x1d\x1e\x85\u2028\u2029"),
                 max_size=30)


@given(st.lists(st.tuples(keys, values), max_size=8))
def test_format_then_parse_round_trips(items):
    assert pairs(format_properties(items)) == items
