"""The group-member helper's reading of what a member printed (no process: its lines set by hand)."""

from __future__ import annotations

from tests.helpers.group_members import Member


def _member(lines):
    member = Member("confluent", "127.0.0.1:1", "t", "g")
    member.lines = lines
    return member


def test_records_not_held_follow_the_assignment_at_the_time():
    member = _member([
        {"event": "records", "records": [[0, 0, "early"]]},            # before any assignment
        {"event": "assigned", "partitions": [0, 1, 2]},
        {"event": "records", "records": [[2, 0, "a"], [0, 1, "b"]]},
        {"event": "revoked", "partitions": [0, 1]},                      # 2 went to another member
        {"event": "records", "records": [[1, 0, "c"], [2, 1, "late"]]},
    ])
    assert member.records_not_held() == [(0, 0, "early"), (2, 1, "late")]
    assert member.partitions == frozenset({0, 1})
    # What the old check said of the same lines: every record's partition against the last assignment.
    assert {p for p, _, _ in member.records()} - member.partitions == {2}


def test_a_member_that_read_only_what_it_held_has_none():
    member = _member([{"event": "assigned", "partitions": [3]}, {"event": "records", "records": [[3, 0, "x"]]}])
    assert member.records_not_held() == []
