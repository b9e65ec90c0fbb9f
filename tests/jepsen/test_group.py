"""The group workload's parts that need no brokers: Kafka's group-to-partition mapping, the member's
configuration (as librdkafka holds it), the recording of member processes' lines, and stopping,
killing and replacing members."""

from __future__ import annotations

import argparse
import collections
import io
import json
import logging
import sys
import textwrap
import threading

import pytest

from tests.jepsen import group as grp
from tests.jepsen import member as mem
from tests.jepsen import runner
from tests.jepsen.history import ASSIGN, COMMIT, CONSUME, REVOKE, Recorder
from tests.jepsen.test_runner import librdkafka_settings


def test_java_string_hash_and_the_coordinator_partition():
    # the values Java 17's String.hashCode gives
    assert grp.java_string_hash("") == 0
    assert grp.java_string_hash("hello") == 99162322
    assert grp.java_string_hash("jepsen-group-7") == 1248805443
    assert grp.java_string_hash("bench-commit-100-99") == -493906699  # wraps past 2**31
    assert grp.java_string_hash("\u00e9t\u00e9") == 227742  # UTF-16 code units, not UTF-8 bytes
    assert grp.java_string_hash("consumer-group-\U0001F600") == 278777704  # a surrogate pair
    assert grp.java_string_hash("polygenelubricants") == -(2**31)
    assert grp.offsets_partition_for("polygenelubricants", 50) == 0  # Kafka's Utils.abs(MIN_VALUE) is 0
    assert grp.offsets_partition_for("bench-commit-100-99", 50) == 493906699 % 50
    assert grp.offsets_partition_for("jepsen-group-7", 50) == 1248805443 % 50


def test_commit_errors_are_classified():
    assert mem.classify_commit_error("ILLEGAL_GENERATION") == "fail"
    assert mem.classify_commit_error("REBALANCE_IN_PROGRESS") == "fail"
    assert mem.classify_commit_error("_TIMED_OUT") == "info"
    assert mem.classify_commit_error("NOT_COORDINATOR") == "info"  # an earlier try may have been stored


def test_member_config_is_accepted_by_librdkafka():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    args = mem.build_parser().parse_args(["--bootstrap", "127.0.0.1:1", "--topic", "t", "--group", "g",
                                          "--member", "m1", "--assignor", "cooperative-sticky",
                                          "--instance-id", "g-slot-0"])
    config = mem.member_config(args, logging.getLogger("tests.jepsen.member-test"))

    def close(consumer):
        consumer.poll(0)
        consumer.close()

    held = librdkafka_settings(confluent_kafka.Consumer, config, close)
    assert held["group.id"] == "g" and held["group.instance.id"] == "g-slot-0"
    assert held["partition.assignment.strategy"] == "cooperative-sticky"
    assert held["enable.auto.commit"] == "false" and held["auto.offset.reset"] == "smallest"  # librdkafka's name for earliest
    assert held["session.timeout.ms"] == "6000" and held["heartbeat.interval.ms"] == "1000"
    # librdkafka logs where each position came from (the helper above reads the settings back through a
    # debug context of its own, so the member's contexts are tried on a consumer of their own); "--debug ''"
    # turns that off.
    assert config["debug"] == mem.DEBUG_CONTEXTS
    close(confluent_kafka.Consumer(config))
    quiet = mem.build_parser().parse_args(["--bootstrap", "127.0.0.1:1", "--topic", "t", "--group", "g",
                                           "--member", "m1", "--debug", ""])
    assert "debug" not in mem.member_config(quiet, logging.getLogger("tests.jepsen.member-test"))


def test_the_evidence_of_a_members_positions_is_picked_from_its_log():
    log = "\n".join([
        "2026-11-29 04:38:03,700 m6 HEARTBEAT [jepsen-m6#consumer-1] [thrd:main]: Heartbeat for group",
        "2026-11-29 04:38:03,701 m6 OFFSETFETCH [jepsen-m6#consumer-1] [thrd:main]: GroupCoordinator/103: "
        "OffsetFetchResponse: jepsen [2] offset -1, leader epoch -1, metadata 0 byte(s): NO_ERROR",
        "2026-11-29 04:38:03,701 m6 OFFSET [jepsen-m6#consumer-1] [thrd:main]: jepsen [2]: offset reset (at offset "
        "INVALID (leader epoch -1), broker -1) to offset BEGINNING (leader epoch -1)",
        "2026-11-29 04:38:03,702 m7 OFFSET [jepsen-m7#consumer-1] [thrd:main]: jepsen [1]: offset reset (at offset "
        "INVALID (leader epoch -1), broker -1) to offset BEGINNING (leader epoch -1)",
    ])
    assert [line.split()[3] for line in mem.evidence(log)] == ["OFFSETFETCH", "OFFSET", "OFFSET"]
    assert [line.split()[2] for line in mem.evidence(log, members=["m6"])] == ["m6", "m6"]
    assert mem.evidence(log, limit=1) == log.splitlines()[-1:]


class FakeTopicPartition:
    def __init__(self, partition, offset=-1001, error=None):
        self.partition = partition
        self.offset = offset
        self.error = error


class FakeConsumer:
    """Answers commits as told; remembers what was committed."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.commits = []

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.commits.append([(tp.partition, tp.offset) for tp in offsets])
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return [FakeTopicPartition(tp.partition, tp.offset, answer.get(tp.partition)) for tp in offsets]

    def memberid(self):
        return "member-1"


class FakeError:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


def lines(out):
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_member_completes_its_consume_before_an_assignment_changes_and_commits_on_revocation():
    from confluent_kafka import KafkaException

    out = io.StringIO()
    m = mem.Member({}, "t", batch=10, batch_ms=500, out=out)
    m.consumer = FakeConsumer([{}, KafkaException(FakeError("_TIMED_OUT")), {1: FakeError("UNKNOWN_MEMBER_ID")}])
    m.on_assign(m.consumer, [FakeTopicPartition(0), FakeTopicPartition(1)])
    m.open_consume()
    m.records = [(0, 5, 50), (1, 7, 70)]
    m.on_revoke(m.consumer, [FakeTopicPartition(0)])  # the consume in flight ends first, then 0 is committed
    m.open_consume()
    m.records = [(1, 8, 80)]
    assert m.finish_consume() == [1]
    m.commit([1])  # times out: indeterminate, so the process is retired
    m.commit([1])  # refused for partition 1
    got = [(x["type"], x["f"], x["proc"], x.get("partitions") or x.get("offsets") or x.get("records")) for x in lines(out)]
    assert got == [
        ("info", ASSIGN, 0, [0, 1]),
        ("invoke", CONSUME, 0, None),
        ("ok", CONSUME, 0, [[0, 5, 50], [1, 7, 70]]),
        ("invoke", COMMIT, 0, [[0, 6]]),
        ("ok", COMMIT, 0, [[0, 6]]),
        ("info", REVOKE, 0, [0]),
        ("invoke", CONSUME, 0, None),
        ("ok", CONSUME, 0, [[1, 8, 80]]),
        ("invoke", COMMIT, 0, [[1, 9]]),
        ("info", COMMIT, 0, [[1, 9]]),
        ("invoke", COMMIT, 1, [[1, 9]]),
        ("fail", COMMIT, 1, [[1, 9]]),
    ]
    assert lines(out)[0]["member_id"] == "member-1"
    assert m.held == {1} and m.committed == {}
    m.on_lost(m.consumer, [FakeTopicPartition(1)])
    assert lines(out)[-1]["error"] == "lost" and m.held == set()


class FakeMessage:
    def __init__(self, partition, offset, value):
        self._p, self._o, self._v = partition, offset, value

    def error(self):
        return None

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def value(self):
        return str(self._v).encode()


class ScriptedConsumer(FakeConsumer):
    """poll() plays a script: rebalance callbacks run inside it, as librdkafka runs them."""

    def __init__(self, member, script):
        super().__init__([{}] * 10)
        self.member = member
        self.script = list(script)
        self.closed = False

    def subscribe(self, topics, on_assign, on_revoke, on_lost):
        self.on_assign, self.on_revoke = on_assign, on_revoke

    def poll(self, timeout):
        step, *arg = self.script.pop(0)
        if step == "assign":
            self.on_assign(self, [FakeTopicPartition(p) for p in arg[0]])
        elif step == "revoke":
            self.on_revoke(self, [FakeTopicPartition(p) for p in arg[0]])
        elif step == "msg":
            return FakeMessage(*arg)
        elif step == "stop":
            self.member.stopping = True
        return None

    def close(self):
        self.on_revoke(self, [FakeTopicPartition(p) for p in sorted(self.member.held)])
        self.closed = True


def test_member_loop_with_callbacks_inside_poll():
    out = io.StringIO()
    m = mem.Member({}, "t", batch=2, batch_ms=60_000, out=out)
    script = [("assign", [0, 1]), ("msg", 0, 0, 10), ("msg", 0, 1, 11), ("msg", 1, 0, 20), ("revoke", [1]),
              ("stop",)]
    consumer = ScriptedConsumer(m, script)
    assert m.run(make_consumer=lambda config: consumer) == 0
    got = [(x["type"], x["f"], x.get("partitions") or x.get("offsets") or x.get("records") or None)
           for x in lines(out)]
    assert got == [
        ("invoke", CONSUME, None),
        ("ok", CONSUME, None),  # the assignment comes inside the first poll: the batch in flight ends first
        ("info", ASSIGN, [0, 1]),
        ("invoke", CONSUME, None),
        ("ok", CONSUME, [[0, 0, 10], [0, 1, 11]]),  # two records: a full batch, then its commit
        ("invoke", COMMIT, [[0, 2]]),
        ("ok", COMMIT, [[0, 2]]),
        ("invoke", CONSUME, None),
        ("ok", CONSUME, [[1, 0, 20]]),  # the revocation completes the batch in flight, then commits
        ("invoke", COMMIT, [[1, 1]]),
        ("ok", COMMIT, [[1, 1]]),
        ("info", REVOKE, [1]),
        ("invoke", CONSUME, None),
        ("ok", CONSUME, None),  # stopping: the last batch, empty
        ("info", REVOKE, [0]),  # close() revokes what is left; nothing left to commit
    ]
    assert consumer.commits == [[(0, 2)], [(1, 1)]] and consumer.closed


FAKE_MEMBER = textwrap.dedent("""
    import json, signal, sys, time
    name = sys.argv[sys.argv.index("--member") + 1]
    def emit(type_, f, proc=0, **kw):
        print(json.dumps({"at": time.monotonic_ns(), "type": type_, "f": f, "proc": proc, **kw}), flush=True)
    def stop(*_):
        emit("info", "revoke", partitions=[0])
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    emit("info", "assign", partitions=[0], member_id=name + "-id")
    emit("invoke", "consume")
    emit("ok", "consume", records=[[0, 0, 1]])
    emit("invoke", "commit", proc=1, offsets=[[0, 1]])
    if "--die" in sys.argv:
        sys.exit(5)
    while True:
        signal.pause()
""")


class FakeMembers(grp.GroupWorkload):
    """Runs FAKE_MEMBER; `reached[name]` is set once that member's commit invocation is recorded."""

    die_once = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reached = collections.defaultdict(threading.Event)

    def _record(self, member, line):
        last = line["f"] == COMMIT and line["type"] == "invoke"
        super()._record(member, line)
        if last:
            self.reached[member.name].set()

    def member_command(self, name, slot):
        cmd = [sys.executable, str(self.out / "fake_member.py"), "--member", name]
        if self.die_once:
            self.die_once = False
            cmd.append("--die")
        return cmd


def fake_workload(tmp_path, recorder, logs):
    (tmp_path / "fake_member.py").write_text(FAKE_MEMBER)
    counter = iter(range(100, 1000))
    return FakeMembers(bootstrap="127.0.0.1:1", recorder=recorder, topic="t", group="g", partitions=1, seed=1,
                       members=2, assignor="range", churn_interval=3600, static=False, session_timeout_ms=6000,
                       op_timeout=5, out=tmp_path, next_process=lambda: next(counter),
                       client_config=lambda **kw: kw, log=logs.append)


def test_member_lines_become_history_records_and_members_are_replaced(tmp_path):
    recorder = Recorder()
    logs = []
    w = fake_workload(tmp_path, recorder, logs)
    w.spawn(0)
    w.die_once = True
    m2 = w.spawn(1)  # exits on its own: a harness error, and its slot gets a new member
    m2.reader.join(timeout=30)
    for name in ("m1", "m2", "m3"):
        assert w.reached[name].wait(timeout=30), name
    assert any("m2 exited on its own (exit 5)" in e for e in w.errors)
    assert w.current[1].name == "m3"
    w.end(w.current[0], "kill")
    w.end(w.current[1], "term")
    ops = recorder.ops
    by_member = {}
    for op in ops:
        by_member.setdefault(op.member, []).append((op.type, op.f))
    assert by_member["m1"] == [("info", ASSIGN), ("invoke", CONSUME), ("ok", CONSUME), ("invoke", COMMIT)]
    assert by_member["m3"][-1] == ("info", REVOKE)  # SIGTERM: it said goodbye
    assert sorted(op.member_id for op in ops if op.f == ASSIGN) == ["m1-id", "m2-id", "m3-id"]
    # each member's own process numbers map to distinct history processes
    procs = {(op.member, op.f): op.process for op in ops if op.type == "invoke"}
    assert len(set(procs.values())) == len(procs)
    # times are the members' own clock readings, relative to the recorder's start
    assert all(0 < op.time < 120 * 10**9 for op in ops)
    assert recorder.in_flight() and all(op.f == COMMIT for op in recorder.in_flight())
    w.kill_all()


def test_dry_run_of_a_group_campaign_schedules_coordinator_faults(tmp_path):
    out = tmp_path / "g"
    assert runner.main(["--workload", "group", "--time-limit", "600", "--nemesis", "kill,pause", "--seed", "3",
                        "--network", "none", "--dry-run", "--out", str(out)]) == 0
    schedule = json.loads((out / "schedule.json").read_text())
    assert schedule["workload"] == "group"
    assert any(f["variant"] == "coordinator" for f in schedule["faults"])
    args = runner.build_parser().parse_args(["--workload", "group"])
    assert isinstance(args, argparse.Namespace) and args.assignor == "range" and args.consumers == 3
    assert runner.group_id(3) == "jepsen-group-3"
