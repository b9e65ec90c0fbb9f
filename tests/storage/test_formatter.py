"""`storage format` and `storage info`: identities written atomically, refusals, idempotence."""

import pytest

from kraftpy.ids import random_uuid_str, uuid_from_str, uuid_to_str
from kraftpy.storage.formatter import FormatError, format_dirs, inspect_dirs
from kraftpy.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    read_meta_properties,
    write_meta_properties,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


def test_random_uuid_is_22_urlsafe_chars_and_round_trips():
    seen = set()
    for _ in range(200):
        text = random_uuid_str()
        assert len(text) == 22 and "=" not in text and not text.startswith("-")
        assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert uuid_to_str(uuid_from_str(text)) == text
        seen.add(text)
    assert len(seen) == 200


@pytest.mark.parametrize("bad", ["", "short", "MkU3OEVBNTcwNTJENDM2Qg=", "MkU3OEVBNTcwNTJENDM2Q!", "MkU3OEVBNTcwNTJENDM2Qh"])
def test_bad_ids_are_refused(bad):
    with pytest.raises(ValueError):
        uuid_from_str(bad)


def test_format_writes_meta_properties_in_every_dir(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b" / "nested"]
    result = format_dirs(dirs, CLUSTER, 3)
    assert result.formatted == tuple(dirs)
    metas = [read_meta_properties(d) for d in dirs]
    for meta in metas:
        assert (meta.cluster_id, meta.node_id, meta.version) == (CLUSTER, 3, 1)
    assert metas[0].directory_id != metas[1].directory_id
    text = (dirs[0] / "meta.properties").read_text()
    assert "version=1" in text and f"cluster.id={CLUSTER}" in text and "node.id=3" in text
    assert not list(tmp_path.rglob("*.tmp"))


def test_format_refuses_formatted_dir_unless_ignore_formatted(tmp_path):
    d = tmp_path / "a"
    format_dirs([d], CLUSTER, 1)
    before = (d / "meta.properties").read_bytes()
    with pytest.raises(FormatError, match="already formatted.*--ignore-formatted"):
        format_dirs([d], CLUSTER, 1)
    result = format_dirs([d], CLUSTER, 1, ignore_formatted=True)
    assert result.skipped == (d,) and result.formatted == ()
    assert (d / "meta.properties").read_bytes() == before


def test_ignore_formatted_formats_only_the_new_dirs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    format_dirs([a], CLUSTER, 1)
    result = format_dirs([a, b], CLUSTER, 1, ignore_formatted=True)
    assert result.formatted == (b,) and result.skipped == (a,)


def test_other_cluster_is_refused_even_with_ignore_formatted_and_nothing_is_written(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    format_dirs([a], random_uuid_str(), 1)
    with pytest.raises(FormatError, match="formatted for cluster"):
        format_dirs([b, a], CLUSTER, 1, ignore_formatted=True)
    assert not b.exists()


def test_other_node_is_refused_even_with_ignore_formatted(tmp_path):
    a = tmp_path / "a"
    format_dirs([a], CLUSTER, 1)
    with pytest.raises(FormatError, match="formatted for node 1, not node 2"):
        format_dirs([a], CLUSTER, 2, ignore_formatted=True)


def test_bad_cluster_id_is_refused(tmp_path):
    with pytest.raises(FormatError, match="random-uuid"):
        format_dirs([tmp_path / "a"], "not-a-uuid", 1)
    assert not (tmp_path / "a").exists()


def test_file_in_place_of_a_dir_is_refused(tmp_path):
    (tmp_path / "a").write_text("x")
    with pytest.raises(FormatError, match="not a directory"):
        format_dirs([tmp_path / "a"], CLUSTER, 1)


def test_unreadable_meta_properties_is_refused(tmp_path):
    d = tmp_path / "a"
    d.mkdir()
    (d / "meta.properties").write_text("version=0\ncluster.id=x\n")
    with pytest.raises(FormatError, match="unreadable meta.properties"):
        format_dirs([d], CLUSTER, 1, ignore_formatted=True)


@pytest.mark.parametrize("text, reason", [
    ("cluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=1\nversion=1\n", "directory.id missing"),
    ("cluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=one\ndirectory.id=MkU3OEVBNTcwNTJENDM2Qg\nversion=1\n",
     "not a non-negative integer"),
    ("cluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=-4\ndirectory.id=MkU3OEVBNTcwNTJENDM2Qg\nversion=1\n",
     "node.id=-4: not a non-negative integer"),
    ("cluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=+4\ndirectory.id=MkU3OEVBNTcwNTJENDM2Qg\nversion=1\n",
     "node.id=\\+4: not a non-negative integer"),
    ("cluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=2147483648\ndirectory.id=MkU3OEVBNTcwNTJENDM2Qg\nversion=1\n",
     "node.id=2147483648: out of range"),
    ("cluster.id=bad\nnode.id=1\ndirectory.id=MkU3OEVBNTcwNTJENDM2Qg\nversion=1\n", "cluster.id=bad"),
    ("cluster.id=MkU3OEVBNTcwNTJENDM2Qg\nnode.id=1\ndirectory.id=MkU3OEVBNTcwNTJENDM2Qg\nversion=2\n",
     "only version 1"),
])
def test_meta_properties_parse_errors(tmp_path, text, reason):
    (tmp_path / "meta.properties").write_text(text)
    with pytest.raises(MetaPropertiesError, match=reason):
        read_meta_properties(tmp_path)


def test_info_reports_states_and_problems(tmp_path):
    a, b, c, missing = tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "missing"
    format_dirs([a], CLUSTER, 1)
    b.mkdir()
    write_meta_properties(b, MetaProperties(random_uuid_str(), 2, random_uuid_str()))
    c.mkdir()
    infos = {i.path: i for i in inspect_dirs([a, b, c, missing], node_id=1)}
    assert infos[a].state == "formatted"
    assert any("differs" in p for p in infos[a].problems)
    assert infos[b].state == "formatted"
    assert any("formatted for node 2" in p for p in infos[b].problems)
    assert infos[c].state == "unformatted" and "run `kraftpy storage format`" in infos[c].problems[0]
    assert infos[missing].state == "missing"


def test_info_on_healthy_dirs_has_no_problems(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    format_dirs(dirs, CLUSTER, 1)
    assert all(not i.problems for i in inspect_dirs(dirs, 1))


def test_info_sees_copied_directory_ids(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    format_dirs([a], CLUSTER, 1)
    b.mkdir()
    (b / "meta.properties").write_bytes((a / "meta.properties").read_bytes())
    assert any("copied" in p for p in inspect_dirs([a, b], 1)[1].problems)
