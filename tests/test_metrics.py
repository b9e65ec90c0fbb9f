"""The process metrics: the event-loop lag watcher sees a blocked trio thread; readiness (GET /ready)
and the scrape-time metrics of in-process nodes; what the metrics mean on a real 3+3 cluster."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from kraftpy.broker.client import KafkaConnection
from kraftpy.cli.dev import dev_properties
from kraftpy.config import load_config
from kraftpy.config.properties import format_properties
from kraftpy.metrics import EVENT_LOOP_LAG, REGISTRY, exposition, help_line, label_value, watch_event_loop_lag
from kraftpy.node import KraftNode
from kraftpy.rpc.kafka_server import PHASES
from kraftpy.storage.formatter import format_dirs
from tests.helpers import forkserver
from tests.helpers.deployments import ProcessCluster, create_topics, retry_coordinator
from tests.helpers.processes import free_ports
from tests.helpers.protocol import batch, metadata, produce
from tests.helpers.scrape import ready, scrape, value
from tests.node.test_kraft_node import api_versions, http_get


class Samples:
    def __init__(self) -> None:
        self.values: list[float] = []
        self.arrived = trio.Event()

    def observe(self, value: float) -> None:
        if not self.arrived.is_set():
            self.values.append(value)
            self.arrived.set()

    async def next(self) -> float:
        """The first sample taken after this call."""
        self.arrived = trio.Event()
        await self.arrived.wait()
        return self.values[-1]


async def test_a_blocked_event_loop_shows_as_lag():
    samples = Samples()
    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: watch_event_loop_lag(0.01, histogram=samples,
                                                                     task_status=task_status))
        await samples.next()
        time.sleep(0.2)  # the stimulus: blocking work on the trio thread (what the metric must reveal)
        assert await samples.next() >= 0.15
        nursery.cancel_scope.cancel()


async def test_a_scrape_is_built_off_the_event_loop_which_keeps_answering_meanwhile():
    """The exposition (seconds of Python with the per-partition series of 100,000 partitions) is built in
    a worker thread: a collector that asks the event loop to run something while it collects gets an
    answer. Built on the event loop, the collector would be on the trio thread, where that call is refused."""
    from kraftpy.metrics import serve_metrics

    answered: list[object] = []

    class AsksTheLoop:
        def collect(self):
            try:
                answered.append(trio.from_thread.run_sync(trio.current_time))
            except RuntimeError as exc:  # on the trio thread itself, or no trio thread at all
                answered.append(exc)
            return iter(())

    collector = AsksTheLoop()
    REGISTRY.register(collector)  # which collects once, to describe it
    answered.clear()
    try:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_metrics, 0)
            status, body = await http_get(port, "/metrics")
            nursery.cancel_scope.cancel()
    finally:
        REGISTRY.unregister(collector)
    assert status == "HTTP/1.1 200 OK" and "kraftpy_event_loop_lag_seconds" in body
    assert len(answered) == 1 and isinstance(answered[0], float), answered


def test_the_lag_histogram_is_exported():
    EVENT_LOOP_LAG.observe(0.004)
    names = {sample.name for metric in REGISTRY.collect() for sample in metric.samples}
    assert "kraftpy_event_loop_lag_seconds_bucket" in names
    buckets = {s.labels["le"]: s.value for m in REGISTRY.collect() for s in m.samples
               if s.name == "kraftpy_event_loop_lag_seconds_bucket"}
    assert buckets["0.005"] >= 1 and "0.003" in buckets


def test_made_up_api_keys_share_one_requests_label():
    """Frames naming any of 65,536 api keys must not make as many metric series."""
    from kraftpy.metrics import REQUESTS
    from kraftpy.rpc.kafka_server import _KNOWN_API_KEYS, _request_metrics

    def label(frame: bytes) -> str:
        counter = _request_metrics(frame)[0]
        [found] = [labels for labels, child in REQUESTS._metrics.items() if child is counter]
        return found[0]

    assert label(b"\x00\x00rest") == "0"  # Produce
    assert label(b"\x00\x12rest") == "18"  # ApiVersions
    assert {label(key.to_bytes(2, "big", signed=True)) for key in (-1, 999, 32767, -32768)} == {"unknown"}
    assert label(b"\x00") == "unknown"
    # Nor does an api key name a new series: requests are counted under the known keys' and "unknown".
    assert len(REQUESTS._metrics) <= len(_KNOWN_API_KEYS) + 1


def test_label_values_and_help_written_as_text_read_back_as_they_were():
    tricky = 'a "quoted" \\ back\nslash'
    text = (help_line("kraftpy_t", "gauge", "Help with a \\ and a\nnewline.")
            + f'kraftpy_t{{topic="{label_value(tricky)}",partition="0"}} 7\n')
    [family] = text_string_to_metric_families(text)
    assert (family.name, family.type, family.documentation) == ("kraftpy_t", "gauge", "Help with a \\ and a\nnewline.")
    assert [(s.labels, s.value) for s in family.samples] == [({"topic": tricky, "partition": "0"}, 7.0)]
    assert label_value("plain-topic_1.x") == "plain-topic_1.x"


# -- readiness and scrape-time metrics of in-process nodes -----------------------------------------

async def _start_node(tmp_path: Path, values: dict[str, str], nursery: trio.Nursery) -> KraftNode:
    (tmp_path / "server.properties").write_text(format_properties(values))
    config = load_config(tmp_path / "server.properties")
    format_dirs(config.all_dirs, "Z3oy_rMHTPiWbnpDv0jArQ", config.node_id)
    node = KraftNode(config, "Z3oy_rMHTPiWbnpDv0jArQ")
    await nursery.start(node.run)
    return node


async def test_a_scrape_writes_every_partitions_series_once_among_the_registrys_families(tmp_path: Path) -> None:
    port, controller_port, metrics_port = free_ports(3)
    values = {**dev_properties(tmp_path, port, controller_port), "metrics.port": str(metrics_port),
              "num.partitions": "3"}
    async with trio.open_nursery() as nursery:
        node = await _start_node(tmp_path, values, nursery)
        with trio.fail_after(60):  # bounds a failure only
            await node.ready.wait()
            async with await KafkaConnection.connect("127.0.0.1", port) as conn:
                while not (await metadata(conn, ["scraped"])).topics[0].partitions:  # auto-created
                    await trio.sleep(0.01)
                for _ in range(2):
                    while (await produce(conn, "scraped", 1, batch(b"a", b"b", b"c"))).error_code:
                        await trio.sleep(0.01)  # until the new partition's leader is applied
        status, text = await http_get(metrics_port, "/metrics")
        assert status == "HTTP/1.1 200 OK"
        families = list(text_string_to_metric_families(text))
        names = [family.name for family in families]
        assert len(names) == len(set(names)), "a family written twice"
        by_name = {family.name: family for family in families}
        for name in ("kraftpy_log_size_bytes", "kraftpy_log_end_offset", "kraftpy_log_start_offset",
                     "kraftpy_log_high_watermark"):
            family = by_name[name]
            assert family.type == "gauge" and family.documentation
            series = {s.labels["partition"]: s.value for s in family.samples if s.labels["topic"] == "scraped"}
            assert set(series) == {"0", "1", "2"}, name
            assert all(s.labels["node_id"] == "1" for s in family.samples)
        ends = {s.labels["partition"]: s.value for s in by_name["kraftpy_log_end_offset"].samples
                if s.labels["topic"] == "scraped"}
        assert ends == {"0": 0, "1": 6, "2": 0}
        sizes = {s.labels["partition"]: s.value for s in by_name["kraftpy_log_size_bytes"].samples
                 if s.labels["topic"] == "scraped"}
        assert sizes["0"] == 0 and sizes["1"] > 0
        nursery.cancel_scope.cancel()


async def test_a_running_combined_node_is_ready_and_reports_both_roles(tmp_path: Path) -> None:
    port, controller_port, metrics_port = free_ports(3)
    values = {**dev_properties(tmp_path, port, controller_port), "metrics.port": str(metrics_port)}
    async with trio.open_nursery() as nursery:
        node = await _start_node(tmp_path, values, nursery)
        with trio.fail_after(60):  # bounds a failure only
            await node.ready.wait()
        assert await http_get(metrics_port, "/ready") == ("HTTP/1.1 200 OK", "ready\n")
        assert await http_get(metrics_port, "/healthz") == ("HTTP/1.1 200 OK", "ok\n")
        await api_versions(port)
        samples = await trio.to_thread.run_sync(scrape, metrics_port)
        assert value(samples, "kraftpy_broker_state", node_id="1") == 3  # Kafka's RUNNING
        assert value(samples, "kraftpy_controller_ready", node_id="1") == 1
        assert value(samples, "kraftpy_active_brokers", node_id="1") == 1
        assert value(samples, "kraftpy_fenced_brokers", node_id="1") == 0
        assert value(samples, "kraftpy_metadata_leader", node_id="1") == 1
        assert value(samples, "kraftpy_last_applied_record_offset", node_id="1") >= 1
        assert value(samples, "kraftpy_last_applied_record_lag_seconds", node_id="1") >= 0
        # The bound on open segment files is in force (half the open-file limit unless set).
        assert value(samples, "kraftpy_log_open_segment_files_max", node_id="1") >= 64
        assert value(samples, "kraftpy_log_open_segment_files", node_id="1") <= value(
            samples, "kraftpy_log_open_segment_files_max", node_id="1")
        assert value(samples, "kraftpy_log_writeback_bytes", node_id="1") >= 0
        assert value(samples, "kraftpy_log_writeback_errors", node_id="1") == 0
        api_versions_served = value(samples, "kraftpy_request_duration_seconds_count", request="ApiVersions")
        assert api_versions_served >= 1
        await node.stop_gracefully()  # the broker's controlled shutdown, the controller's resignation
        assert await http_get(metrics_port, "/ready") == (
            "HTTP/1.1 503 Service Unavailable", "controller 1: no known quorum leader; broker 1: stopping\n")
        samples = await trio.to_thread.run_sync(scrape, metrics_port)
        assert value(samples, "kraftpy_broker_state", node_id="1") == 6  # PENDING_CONTROLLED_SHUTDOWN
        nursery.cancel_scope.cancel()
    # Stopped nodes leave the collector.
    assert not any(n == "kraftpy_broker_state" for n, _ in scrape_registry())


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
async def test_metrics_host_every_interface_answers_on_loopback_and_beyond(tmp_path: Path, host: str) -> None:
    """metrics.host=0.0.0.0 or ::: /ready answers on 127.0.0.1, and on 127.0.0.2 too, which a socket
    bound to 127.0.0.1 (the default) refuses: only a bind to every interface accepts it. :: takes IPv6
    (::1) as well, on the same port."""
    port, controller_port, metrics_port = free_ports(3)
    values = {**dev_properties(tmp_path, port, controller_port), "metrics.port": str(metrics_port),
              "metrics.host": host}

    async def get_ready(address: str) -> bytes:
        stream = await trio.open_tcp_stream(address, metrics_port)
        await stream.send_all(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := await stream.receive_some(65536):
            answer += chunk
        await stream.aclose()
        return answer

    async with trio.open_nursery() as nursery:
        node = await _start_node(tmp_path, values, nursery)
        with trio.fail_after(60):  # bounds a failure only
            await node.ready.wait()
        assert await http_get(metrics_port, "/ready") == ("HTTP/1.1 200 OK", "ready\n")
        for address in ("127.0.0.2", "::1") if host == "::" else ("127.0.0.2",):
            answer = await get_ready(address)
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nready\n"), address
        nursery.cancel_scope.cancel()


def test_a_bad_metrics_host_stops_the_process_with_key_value_and_line(tmp_path: Path) -> None:
    config = tmp_path / "controller.properties"
    config.write_text("process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9093\n"
                      "listeners=CONTROLLER://127.0.0.1:9093\ncontroller.listener.names=CONTROLLER\n"
                      f"log.dirs={tmp_path / 'data'}\nmetrics.port=9100\nmetrics.host=every interface\n")
    result = forkserver.run(["server", "-c", str(config)], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1
    assert result.stderr == (f"kraftpy: configuration error: {config}:8: metrics.host=every interface: "
                             "not an IP address or host name\n")


async def test_a_controller_without_a_quorum_leader_is_not_ready(tmp_path: Path) -> None:
    """Voters 2 and 3 never start: no leader can be elected, so the controller is not ready."""
    p1, p2, p3, metrics_port = free_ports(4)
    values = {"process.roles": "controller", "node.id": "1", "listeners": f"CONTROLLER://127.0.0.1:{p1}",
              "controller.listener.names": "CONTROLLER", "log.dirs": str(tmp_path / "data"),
              "controller.quorum.voters": f"1@127.0.0.1:{p1},2@127.0.0.1:{p2},3@127.0.0.1:{p3}",
              "metrics.port": str(metrics_port)}
    async with trio.open_nursery() as nursery:
        await _start_node(tmp_path, values, nursery)
        status, body = await http_get(metrics_port, "/ready")
        assert status == "HTTP/1.1 503 Service Unavailable"
        assert body == "controller 1: no known quorum leader\n"
        assert (await http_get(metrics_port, "/healthz"))[0] == "HTTP/1.1 200 OK"
        samples = await trio.to_thread.run_sync(scrape, metrics_port)
        assert value(samples, "kraftpy_controller_ready", node_id="1") == 0
        nursery.cancel_scope.cancel()


async def test_a_broker_that_is_not_running_is_not_ready(tmp_path: Path) -> None:
    """No controller answers: the broker cannot register, so it never runs and is not ready."""
    broker_port, voter_port, metrics_port = free_ports(3)
    values = {"process.roles": "broker", "node.id": "4", "listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
              "controller.listener.names": "CONTROLLER", "log.dirs": str(tmp_path / "data"),
              "controller.quorum.voters": f"1@127.0.0.1:{voter_port}", "metrics.port": str(metrics_port)}
    (tmp_path / "server.properties").write_text(format_properties(values))
    config = load_config(tmp_path / "server.properties")
    format_dirs(config.all_dirs, "Z3oy_rMHTPiWbnpDv0jArQ", config.node_id)
    node = KraftNode(config, "Z3oy_rMHTPiWbnpDv0jArQ")
    with trio.fail_after(30):  # bounds a failure only
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node.run)  # its start only ends once the broker has registered
            while node.lifecycle is None:  # the broker's parts are built (on the event loop, then threads)
                await trio.testing.wait_all_tasks_blocked(cushion=0.01)
            status, body = await http_get(metrics_port, "/ready")
            assert status == "HTTP/1.1 503 Service Unavailable"
            assert body == "broker 4: offline\n"
            samples = await trio.to_thread.run_sync(scrape, metrics_port)
            assert value(samples, "kraftpy_broker_state", node_id="4") == 0
            nursery.cancel_scope.cancel()


def scrape_registry() -> set[tuple[str, frozenset]]:
    return {(s.name, frozenset(s.labels.items())) for m in REGISTRY.collect() for s in m.samples}


# -- what the metrics mean on a real 3+3 cluster --------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("confluent_kafka")
    root = tmp_path_factory.mktemp("metrics")
    with ProcessCluster(root, metrics=True, log_level="info") as deployed:
        yield deployed


def wait_for_samples(cluster: ProcessCluster, port: int, check, what: str, timeout: float = 60.0):
    """Scrape ``port`` again as the processes log, and at least every 100 ms (what a metric shows changes
    without a line at the log level of this cluster: a standby controller replaying a fencing logs
    nothing), until ``check(samples)`` holds."""

    def scraped():
        samples = scrape(port)
        return samples if check(samples) else None

    return cluster.eventually(scraped, what, timeout, recheck=0.1)


@pytest.mark.slow
def test_group_lag_is_what_was_produced_minus_what_was_committed(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    create_topics(cluster.bootstrap, [NewTopic("lagged", num_partitions=1, replication_factor=3)])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0})
    for i in range(100):
        producer.produce("lagged", value=b"%03d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "lag-group",
                         "enable.auto.commit": False, "log_level": 0})
    try:
        retry_coordinator(lambda: consumer.commit(offsets=[TopicPartition("lagged", 0, 40)], asynchronous=False))
        low, high = consumer.get_watermark_offsets(TopicPartition("lagged", 0), timeout=30)
        consumer.assign([TopicPartition("lagged", 0, 0)])
        fetched = 0
        while fetched < 100:
            message = consumer.poll(30)
            assert message is not None, "no record in 30 s"
            fetched += message.error() is None  # a retriable error (a leader just learnt) is polled again
    finally:
        consumer.close()
    assert (low, high) == (0, 100)

    def lag_reported(samples):
        return value(samples, "kraftpy_consumer_group_lag", group="lag-group", topic="lagged") is not None

    ports = cluster.broker_metrics_ports
    coordinators = [b for b, port in ports.items() if lag_reported(scrape(port))]
    assert len(coordinators) == 1, coordinators  # only the group's coordinator reports it
    samples = wait_for_samples(cluster, ports[coordinators[0]], lambda s: value(
        s, "kraftpy_consumer_group_lag", group="lag-group", topic="lagged", partition="0") == 60,
        "the coordinator's high watermark to reach 100")
    assert value(samples, "kraftpy_consumer_group_committed_offset", group="lag-group", topic="lagged") == 40

    every = [scrape(port) for port in ports.values()]
    assert sum(value(s, "kraftpy_topic_messages_in_total", topic="lagged") or 0 for s in every) == 100
    assert sum(value(s, "kraftpy_topic_bytes_in_total", topic="lagged") or 0 for s in every) > 100 * 3
    assert sum(value(s, "kraftpy_topic_bytes_out_total", topic="lagged") or 0 for s in every) > 100 * 3
    assert all(value(s, "kraftpy_log_size_bytes", topic="lagged", partition="0") > 0 for s in every)
    assert all(value(s, "kraftpy_log_start_offset", topic="lagged", partition="0") == 0 for s in every)
    produces_served = sum(value(s, "kraftpy_request_duration_seconds_count", request="Produce") or 0 for s in every)
    assert produces_served >= 1
    # Where the requests' time went (Kafka's RequestMetrics phases): the acks=all produces waited for the
    # followers (remote), the followers' fetches are FetchFollower and the consumer's FetchConsumer, and
    # each request's phases add up to its total.
    def phase(samples, request, name, what="sum"):
        return value(samples, f"kraftpy_request_phase_seconds_{what}", request=request, phase=name) or 0

    assert sum(phase(s, "Produce", "remote") for s in every) > 0
    assert sum(phase(s, "Produce", "remote", "count") for s in every) == produces_served
    assert sum(phase(s, "FetchFollower", "remote", "count") for s in every) > 0
    assert sum(phase(s, "FetchConsumer", "local", "count") for s in every) > 0
    assert not any(value(s, "kraftpy_request_duration_seconds_count", request="Fetch") for s in every)
    def phases_add_up(samples) -> bool:
        for request in ("Produce", "FetchFollower", "FetchConsumer", "Metadata"):
            total = value(samples, "kraftpy_request_duration_seconds_sum", request=request) or 0
            phases = sum(phase(samples, request, name) for name in PHASES)
            if phases != pytest.approx(total, rel=1e-6, abs=1e-6):
                return False
        return True

    # A scrape reads the families one after another while the broker serves (the followers' fetches
    # go on): one that a request ended in the middle of shows its total but not its phases, or the
    # reverse. The next scrape without one adds up.
    for port in ports.values():
        wait_for_samples(cluster, port, phases_add_up, f"the request phases of {port} to add up to the totals")
    leaders = [s for s in every if value(s, "kraftpy_log_end_offset", topic="lagged", partition="0") == 100]
    assert leaders  # the leader's; a follower may be a fetch behind
    # A controller's image follows the metadata log: on a loaded machine a standby may be a moment behind.
    wait_for_samples(cluster, cluster.metrics_ports[1], lambda s: (
        (value(s, "kraftpy_global_topics") or 0) >= 2  # lagged and __consumer_offsets
        and value(s, "kraftpy_active_brokers") == 3), "controller 1 to count both topics and three brokers")


@pytest.mark.slow
def test_a_dead_follower_makes_the_leaders_partitions_under_replicated(cluster):
    """Broker 6 follows every partition of "urp" broker 4 leads; killed, it leaves their ISR: each
    partition 4 leads becomes under-replicated, at min ISR (min.insync.replicas=2), and the
    controllers count one fenced broker. Restarted, it catches up and everything returns to 0."""
    from confluent_kafka.admin import NewTopic

    create_topics(cluster.bootstrap, [NewTopic("urp", num_partitions=1, replica_assignment=[[4, 5, 6]])])
    leader_port = cluster.broker_metrics_ports[4]
    before = wait_for_samples(cluster, leader_port, lambda s: value(
        s, "kraftpy_log_end_offset", topic="urp", partition="0") is not None
        and value(s, "kraftpy_under_replicated_partitions") == 0, "broker 4 to lead urp-0, fully replicated")
    shrinks = value(before, "kraftpy_isr_shrinks_total") or 0
    expands = value(before, "kraftpy_isr_expands_total") or 0

    cluster.brokers[6].kill()
    after = wait_for_samples(cluster, leader_port, lambda s: value(s, "kraftpy_under_replicated_partitions") >= 1
                             and value(s, "kraftpy_under_replicated_partitions") == value(s, "kraftpy_leader_count"),
                             "broker 4's partitions to lose broker 6 from their ISR")
    assert value(after, "kraftpy_at_min_isr_partitions") == value(after, "kraftpy_leader_count")
    assert value(after, "kraftpy_under_min_isr_partitions") == 0
    assert value(after, "kraftpy_isr_shrinks_total") > shrinks
    wait_for_samples(cluster, cluster.metrics_ports[1], lambda s: value(s, "kraftpy_fenced_brokers") == 1
                     and value(s, "kraftpy_active_brokers") == 2, "the controllers to fence broker 6")
    assert ready(cluster.broker_metrics_ports[6])[0] == 0  # nothing answers there

    cluster.restart_broker(6)
    assert ready(cluster.broker_metrics_ports[6]) == (200, "ready")
    # The leader's ISR changes once the controller answers its AlterPartition; the expansion is
    # counted when the record reaches the broker's metadata, a moment later.
    wait_for_samples(cluster, leader_port, lambda s: value(s, "kraftpy_under_replicated_partitions") == 0
                     and (value(s, "kraftpy_isr_expands_total") or 0) > expands,
                     "broker 6 back in the ISR of broker 4's partitions")
    for port in cluster.metrics_ports.values():
        assert ready(port) == (200, "ready")
    assert value(scrape(cluster.metrics_ports[1]), "kraftpy_offline_partitions") == 0


# -- the Grafana dashboard -------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "kraftpy-dashboard.json"

#: The PromQL functions and aggregations the dashboard may use.
PROMQL_FUNCTIONS = {"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile",
                    "scalar", "time", "topk", "bottomk", "abs", "delta", "deriv", "clamp_min"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                   "offset"}
_TOKEN = re.compile(r"""\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<string>"[^"]*")
                        |(?P<range>\[\d+[smhdw]\])|(?P<op>==|!=|=~|!~|<=|>=|[-+*/%^(){},=<>]))""", re.X)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects, checking as it goes that it tokenizes, that its
    brackets balance, that each function is one PromQL has, and that label matchers are well formed."""
    tokens, pos = [], 0
    while pos < len(expr.rstrip()):
        match = _TOKEN.match(expr, pos)
        assert match and match.end() > pos, f"cannot read {expr[pos:]!r} in {expr!r}"
        kind = match.lastgroup
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    names: set[str] = set()
    depth, in_braces, grouping = 0, False, False
    for i, (kind, text) in enumerate(tokens):
        following = tokens[i + 1][1] if i + 1 < len(tokens) else None
        if text == "(":
            depth += 1
        elif text == ")":
            depth -= 1
            assert depth >= 0, f"unbalanced ) in {expr!r}"
            grouping = False
        elif text == "{":
            assert not in_braces, expr
            in_braces = True
        elif text == "}":
            assert in_braces, expr
            in_braces = False
        elif kind == "name" and not in_braces and not grouping:
            if text in PROMQL_KEYWORDS:
                grouping = following == "("
            elif following == "(" or following in ("by", "without"):  # a call, or `sum by (x) (...)`
                assert text in PROMQL_FUNCTIONS, f"unknown function {text} in {expr!r}"
            else:
                names.add(text)
        elif kind == "name" and in_braces:
            assert following in ("=", "!=", "=~", "!~"), f"bad label matcher at {text} in {expr!r}"
    assert depth == 0 and not in_braces, f"unbalanced brackets in {expr!r}"
    return names


def exported_sample_names() -> set[str]:
    """Every sample name the process registry can export, once a broker and a controller are tracked
    (kraftpy.node.metrics registers its collector on import)."""
    import kraftpy.node.metrics  # noqa: F401 - registers the node collector
    import kraftpy.rpc.kafka_server  # noqa: F401 - the request latency series

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
                "summary": ("_sum", "_count", "")}
    # A scrape's families: the registry's and those the text sections write (the per-partition series).
    families = text_string_to_metric_families(exposition().decode())
    return {family.name + suffix for family in families for suffix in suffixes[family.type]}


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert exprs
    return exprs


def test_every_dashboard_query_parses_and_names_an_exported_metric():
    exported = exported_sample_names()
    for expr in dashboard_exprs():
        names = promql_metric_names(expr)
        assert names, f"{expr!r} selects no metric"
        assert names <= exported, f"{expr!r} names {sorted(names - exported)}, which kraftpy does not export"


def test_the_dashboard_shows_every_metric_the_docs_map():
    """Every metric of the table in docs/operations.md "Reading the metrics" is exported and charted."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Reading the metrics"):]
    section = section[:section.index("\n## ", 3)]
    documented = set(re.findall(r"^\| `(kraftpy_\w+)", section, re.M))
    documented |= set(re.findall(r"^\| `kraftpy_\w+[^|]*`, `(kraftpy_\w+)", section, re.M))
    assert len(documented) > 30
    exported = exported_sample_names()
    charted = {name for expr in dashboard_exprs() for name in promql_metric_names(expr)}
    for name in sorted(documented):
        samples = {name, name + "_bucket"}
        assert samples & exported, f"docs map {name}, which kraftpy does not export"
        assert samples & charted, f"docs map {name}, which the dashboard does not show"


def test_the_query_reader_refuses_what_it_should():
    assert promql_metric_names('sum by (topic) (rate(kraftpy_topic_bytes_in_total{topic="a"}[1m]))') == {
        "kraftpy_topic_bytes_in_total"}
    for bad in ("sum(kraftpy_x", "made_up(kraftpy_x)", "kraftpy_x{topic}", "kraftpy_x)"):
        with pytest.raises(AssertionError):
            promql_metric_names(bad)
