"""`kraftpy perf produce | consume` against a real `kraftpy dev`, and the engine's pure parts.

One `kraftpy dev` process serves the whole module; each test uses its own topic. Record counts are
small, and the checks are about consistency (counts, bytes, ordered percentiles), never timings.
"""

from __future__ import annotations

import json
import uuid

import pytest

from kraftpy.cli.main import app
from kraftpy.cli.perf import (
    ConsumeSettings,
    LatencyStats,
    PerfError,
    ProduceSettings,
    Throttler,
    latency_stats,
    make_payload,
    parse_partitions,
    parse_props,
    percentile,
    run_consume,
    run_produce,
)
from tests.helpers.cli_runner import CliRunner
from tests.helpers.processes import DevProcess, free_ports
from tests.helpers.terminal import run_on_terminal

pytest.importorskip("confluent_kafka")

runner = CliRunner()


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    with DevProcess(tmp_path_factory.mktemp("perf") / "dev") as process:
        yield process


def topic_name() -> str:
    return f"perf-{uuid.uuid4().hex[:10]}"


def perf(*args: object):
    return runner.invoke(app, ["perf", *(str(a) for a in args)])


def check_latency(stats: dict, count: int) -> None:
    assert stats["count"] == count
    assert 0 <= stats["min_ms"] <= stats["p50_ms"] <= stats["p99_ms"] <= stats["p999_ms"] <= stats["max_ms"]
    assert stats["min_ms"] <= stats["avg_ms"] <= stats["max_ms"]


def check_rates(result: dict) -> None:
    assert isinstance(result["elapsed_s"], float)
    assert result["records_per_sec"] == pytest.approx(result["records"] / result["elapsed_s"])
    assert result["mb_per_sec"] == pytest.approx(result["bytes"] / 1e6 / result["elapsed_s"])


# -- pure parts ------------------------------------------------------------------------------------


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 1001)]
    assert percentile(values, 0.5) == 500.0
    assert percentile(values, 0.99) == 990.0
    assert percentile(values, 0.999) == 999.0
    assert percentile(values, 1.0) == 1000.0
    assert percentile([7.0], 0.999) == 7.0
    assert percentile([], 0.5) == 0.0


def test_latency_stats():
    stats = latency_stats([4.0, 1.0, 3.0, 2.0])
    assert stats == LatencyStats(count=4, avg_ms=2.5, min_ms=1.0, p50_ms=2.0, p99_ms=4.0, p999_ms=4.0,
                                 max_ms=4.0)
    assert latency_stats([]) == LatencyStats()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_throttler_holds_the_rate():
    clock = FakeClock()
    throttler = Throttler(1000, clock=clock, sleep=clock.sleep)
    for sent in range(1, 2001):
        clock.now += 0.0001  # sending takes 0.1 ms: ten times faster than the target
        throttler.wait(sent)
    assert clock.now - 100.0 == pytest.approx(2.0)  # 2000 records at 1000/s


def test_throttler_does_not_burst_after_a_stall():
    clock = FakeClock()
    throttler = Throttler(100, clock=clock, sleep=clock.sleep, max_debt_s=1.0)
    throttler.wait(1)
    clock.now += 5.0  # a 5 s stall: 500 records behind
    throttler.wait(2)
    clock.slept.clear()
    throttler.wait(3)
    assert clock.slept == [pytest.approx(0.01)]  # back to one record per 10 ms, not a 500-record burst


def test_unlimited_throttler_never_sleeps():
    clock = FakeClock()
    throttler = Throttler(-1, clock=clock, sleep=clock.sleep)
    for sent in range(1, 100):
        throttler.wait(sent)
    assert clock.slept == [] and not throttler.enabled


def test_parsing():
    assert parse_props(["linger.ms=5", " acks = 1 ", "client.id=a=b"], "--x") == {
        "linger.ms": "5", "acks": "1", "client.id": "a=b"}
    assert parse_props(None, "--x") == {}
    with pytest.raises(PerfError, match="--producer-props='nope'"):
        parse_props(["nope"], "--producer-props")
    assert parse_partitions("2,0, 1,2") == [0, 1, 2]
    assert parse_partitions(None) is None
    for bad in ("a", "-1"):
        with pytest.raises(PerfError, match="--partitions"):
            parse_partitions(bad)


def test_payload_is_letters_of_the_size():
    payload = make_payload(100)
    assert len(payload) == 100 and payload.isalpha() and payload.isupper()
    assert make_payload(0) == b""


@pytest.mark.parametrize("args, message", [
    (["--acks", "2"], "--acks=2"),
    (["--compression", "brotli"], "--compression=brotli"),
    (["--num-records", "0"], "--num-records=0"),
    (["--producer-props", "linger.ms"], "--producer-props='linger.ms'"),
])
def test_produce_rejects_bad_options(args, message):
    base = {"--topic": "t", "--num-records": "10", "--bootstrap-server": "127.0.0.1:1"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    result = perf("produce", *[x for kv in base.items() for x in kv])
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


def test_consume_rejects_bad_options():
    result = perf("consume", "--topic", "t", "--messages", "1", "--partitions", "x")
    assert result.exit_code == 2 and "--partitions='x'" in result.stderr
    result = perf("consume", "--topic", "t", "--messages", "0")
    assert result.exit_code == 2 and "--messages=0" in result.stderr


# -- against kraftpy dev ---------------------------------------------------------------------------


@pytest.mark.slow
def test_produce_json_numbers_are_consistent(dev):
    result = perf("produce", "--bootstrap-server", dev.bootstrap, "--topic", topic_name(),
                  "--num-records", 2000, "--record-size", 64, "--acks", 1, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["kind"] == "produce"
    assert out["records"] == 2000 and out["errors"] == 0 and out["first_error"] is None
    assert out["bytes"] == 2000 * 64
    check_rates(out)
    check_latency(out["latency"], 2000)


@pytest.mark.slow
def test_produce_then_consume_from_beginning(dev):
    topic = topic_name()
    produced = run_produce(ProduceSettings(dev.bootstrap, topic, num_records=1500, record_size=50,
                                           compression="zstd", batch_size=16384, linger_ms=2,
                                           props={"client.id": "perf-test"}))
    assert (produced.records, produced.errors, produced.bytes) == (1500, 0, 1500 * 50)
    result = perf("consume", "--bootstrap-server", dev.bootstrap, "--topic", topic, "--messages", 1500,
                  "--from-beginning", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["kind"] == "consume"
    assert out["records"] == 1500 and not out["timed_out"] and out["errors"] == 0
    assert out["bytes"] == 1500 * 50
    assert out["first_record_ms"] <= out["elapsed_s"] * 1000
    check_rates(out)
    check_latency(out["e2e_latency"], 1500)


@pytest.mark.slow
def test_consume_named_partitions(dev):
    topic = topic_name()
    produced = run_produce(ProduceSettings(dev.bootstrap, topic, num_records=300, record_size=10, acks="1"))
    assert produced.records == 300
    by_partition = run_consume(ConsumeSettings(dev.bootstrap, topic, messages=300, from_beginning=True,
                                               partitions=[0]))
    assert (by_partition.records, by_partition.bytes) == (300, 3000)
    everything = run_consume(ConsumeSettings(dev.bootstrap, topic, messages=300, from_beginning=True))
    assert (everything.records, everything.bytes, everything.timed_out) == (300, 3000, False)
    with pytest.raises(PerfError, match=r"not \[5\]"):
        run_consume(ConsumeSettings(dev.bootstrap, topic, messages=1, partitions=[5]))


@pytest.mark.slow
def test_consume_stops_after_the_timeout_with_what_it_got(dev):
    topic = topic_name()
    assert run_produce(ProduceSettings(dev.bootstrap, topic, num_records=10, record_size=20)).records == 10
    # The idle timeout has to pass (it is what this test is about), so it is the test's duration; it
    # must also be long enough that the ten records arrive before it ends the read.
    result = perf("consume", "--bootstrap-server", dev.bootstrap, "--topic", topic, "--messages", 25,
                  "--from-beginning", "--timeout", 3000, "--json")
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert (out["records"], out["bytes"], out["timed_out"]) == (10, 200, True)


@pytest.mark.slow
def test_plain_output_without_a_terminal(dev):
    topic = topic_name()
    result = perf("produce", "--bootstrap-server", dev.bootstrap, "--topic", topic, "--num-records", 500,
                  "--throughput", -1, "--acks", "all")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("500 records sent, ")
    assert "records/sec" in result.stdout and "p99.9" in result.stdout
    assert "\x1b[" not in result.stdout  # no progress bar, no colours
    result = perf("consume", "--bootstrap-server", dev.bootstrap, "--topic", topic, "--messages", 500,
                  "--from-beginning")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("500 records consumed, ") and "end-to-end latency" in result.stdout


@pytest.mark.slow
def test_unknown_topic_and_unreachable_broker(dev):
    # The admin commands' exit codes: 1 an unknown topic, 3 no broker answering.
    result = perf("consume", "--bootstrap-server", dev.bootstrap, "--topic", topic_name(), "--messages", 1)
    assert result.exit_code == 1 and "Unknown topic" in result.stderr
    (port,) = free_ports(1)
    with pytest.raises(PerfError, match="no broker answered") as refused:
        run_produce(ProduceSettings(f"127.0.0.1:{port}", "t", num_records=1, connect_timeout_s=0.5))
    assert refused.value.exit_code == 3


@pytest.mark.slow
def test_command_config_file_and_a_record_the_client_refuses(dev, tmp_path):
    """--command-config's client settings apply (the props flags win); a record over message.max.bytes is
    Kafka's error in one line, exit 1, not a traceback."""
    topic = topic_name()
    settings = tmp_path / "client.properties"
    settings.write_text("message.max.bytes=1000\n")
    refused = perf("produce", "--bootstrap-server", dev.bootstrap, "--topic", topic, "--num-records", 1,
                   "--record-size", 2000, "--command-config", settings)
    assert refused.exit_code == 1, refused.output
    assert refused.stderr == f"kraftpy: topic {topic}: MSG_SIZE_TOO_LARGE: Unable to produce message: Broker: " \
                             "Message size too large\n"
    won = perf("produce", "--bootstrap-server", dev.bootstrap, "--topic", topic, "--num-records", 1,
               "--record-size", 2000, "--command-config", settings, "--producer-props", "message.max.bytes=100000",
               "--json")
    assert won.exit_code == 0, won.output
    assert json.loads(won.stdout)["records"] == 1
    missing = perf("consume", "--bootstrap-server", dev.bootstrap, "--topic", topic, "--messages", 1,
                   "--command-config", tmp_path / "none")
    assert missing.exit_code == 2 and "--command-config=" in missing.stderr and "cannot read" in missing.stderr


@pytest.mark.slow
def test_progress_bar_on_a_terminal(dev):
    """On a terminal (a pseudo-terminal here) the command draws a rich progress bar."""
    run = run_on_terminal("perf", "produce", "--bootstrap-server", dev.bootstrap, "--topic", topic_name(),
                          "--num-records", "3000", "--throughput", "6000", terminal="stdout", timeout=60)
    assert run.returncode == 0, run.piped
    screen = run.screen
    assert "produce perf-" in screen and "━" in screen  # the bar's description and its track
    assert "3000 records sent" in screen
