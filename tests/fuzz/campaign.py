"""A fuzzing campaign: a real ``kraftpy dev``, frames from a seed, outcomes judged, a report.

Theory of operation
-------------------
1. Start the target (`DevTarget`) and set it up: protected topics (produce traffic whose
   acknowledgements are checked at the end), scratch topics (for deletes and config changes), the
   versions it serves (ApiVersions), topic ids (Metadata) and the quorum's state (QuorumStatus).
2. Send frames in chunks. Frame ``i`` is made from ``frame_rng(seed, i)`` and the pools as refreshed
   before its chunk, so the same seed sends the same choices (values relative to the target's state,
   such as epochs and topic ids, follow that state). Each frame goes on a fresh connection; several
   workers send at once. A frame ends in an answer, a close, or a hang (neither within the bound,
   plus whatever wait the request itself asks for). Frames that reach an open known bug named in
   ``skip`` are not sent, or their findings are reported as known (`known_bugs`).
3. Judge each answer: a Kafka answer must decode as the response to what the broker parsed, carry
   the right correlation id and no UNKNOWN_SERVER_ERROR; a Produce's partitions answered without error
   become acknowledgements. A control answer must be a map for the request id, and not
   UNKNOWN_SERVER_ERROR. After each chunk, check that the process lives; on a crash, record the frames
   sent last as suspects and restart on the same directory.
4. At the end, read back every acknowledged batch (`verify.check_acks`), compare memory with the
   baseline, stop the target with Ctrl-C (a clean exit is expected) and write the report.
"""

from __future__ import annotations

import collections
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import msgpack
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import InvalidRequestError, InvalidResponseError, UnsupportedVersionError
from kraftpy.protocol.frames import FrameReader, decode_response, parse_request
from kraftpy.protocol.messages import ApiVersionsRequest, CreateTopicsRequest, MetadataRequest
from kraftpy.protocol.schema import Struct
from kraftpy.rpc.control import ControlClient, RpcError
from tests.fuzz import control_gen, kafka_gen
from tests.fuzz.frames import CONTROLLER_KAFKA, KAFKA, KAFKA_PORTS, Frame, Pools, frame_rng
from tests.fuzz.known_bugs import KnownBug
from tests.fuzz.report import Finding, Report
from tests.fuzz.target import NOTABLE_EVENTS, DevTarget, TargetFailed
from tests.fuzz.verify import Ack, check_acks

PROTECTED_TOPICS = {"fuzz-acked-a": 2, "fuzz-acked-b": 3}
SCRATCH_TOPICS = {"fuzz-scratch-0": 1, "fuzz-scratch-1": 2}
#: Requests asking to wait longer than this (ms) are long polls: no answer within the bound is no hang.
LONG_POLL_MS = 60_000
MAX_ANSWER_BYTES = 256 * 1024 * 1024


@attrs.define
class CampaignConfig:
    seed: int = 1
    frames: int = 3000
    #: Frames are numbered from here (a replay of one frame sets it and ``frames=1``).
    first: int = 0
    workers: int = 4
    #: Share of frames for the control port.
    control_share: float = 0.2
    #: Share of Kafka-protocol frames for the controller listener (the APIs it serves there).
    controller_kafka_share: float = 0.05
    chunk: int = 250
    #: Seconds a frame may go without answer or close (beyond what it asks to wait) before it is a hang.
    hang_bound: float = 10.0
    skip: tuple[KnownBug, ...] = ()
    directory: Path | None = None
    out: Path | None = None
    restart_on_crash: bool = True
    #: Only these mutation classes (None: all), for focused runs.
    classes: frozenset[str] | None = None
    #: Only these frame indexes (a replay).
    indexes: tuple[int, ...] | None = None
    #: Seconds to wait after the last frame before the final checks, for a crash that comes later
    #: (replays of single frames use it; a campaign reads every partition back, which takes a while,
    #: and looks again afterwards).
    settle: float = 0.0
    #: Resident memory the run may add for good (final minus baseline), after its first quarter, and
    #: at its peak (in MiB). The peak allows for queued.max.request.bytes (200 MiB): request buffers
    #: the broker holds by design while large frames come in.
    rss_growth_limit_mib: int = 192
    rss_late_growth_limit_mib: int = 64
    rss_peak_limit_mib: int = 384
    #: Descriptors the process may hold at the end beyond those it held after setup.
    open_files_growth_limit: int = 500
    progress: Callable[[str], None] | None = None


@attrs.define
class Outcome:
    kind: str  # answered | closed | hang | long-poll | down
    answer: bytes | None = None
    local_port: int | None = None
    elapsed: float = 0.0


def make_frame(seed: int, index: int, pools: Pools, control_share: float,
               controller_kafka_share: float = 0.0) -> Frame:
    rng = frame_rng(seed, index)
    draw = rng.random()
    if draw < control_share:
        return control_gen.control_frame(rng, pools, index)
    if draw < control_share + controller_kafka_share and pools.controller_served:
        # A Kafka frame of an API the controller listener serves, sent there.
        frame = kafka_gen.kafka_frame(rng, attrs.evolve(pools, served=pools.controller_served), index)
        return attrs.evolve(frame, port=CONTROLLER_KAFKA)
    return kafka_gen.kafka_frame(rng, pools, index)


# -- talking to the target -------------------------------------------------------------------------


async def send_frame(port: int, frame: Frame, bound: float, long_poll: bool) -> Outcome:
    """Send one frame on a fresh connection and wait for the first answer frame, a close, or the bound."""
    start = time.monotonic()
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return Outcome("down")
    local_port = stream.socket.getsockname()[1]
    reader = FrameReader(MAX_ANSWER_BYTES)
    answer: bytes | None = None
    kind = "hang"
    try:
        with trio.move_on_after(bound):
            try:
                await stream.send_all(frame.data)
                if frame.half_close:
                    await stream.send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # the server closed while we were sending: see what it said, if anything
            try:
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        kind = "closed"
                        break
                    frames = reader.feed(data)
                    if frames:
                        answer, kind = bytes(frames[0]), "answered"
                        break
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                kind = "closed"
            except Exception:  # an answer frame we cannot even reassemble
                kind = "answered"
                answer = b""
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()
    if kind == "hang" and long_poll:
        kind = "long-poll"
    return Outcome(kind, answer, local_port, time.monotonic() - start)


def _wait_ms(value: Any, names: Iterable[str]) -> int:
    """The largest wait field (ms) anywhere in a decoded request object or msgpack tree."""
    names = set(names)
    best = 0
    stack = [value]
    seen = 0
    while stack and seen < 10_000:
        node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            for k, v in node.items():
                if k in names and type(v) is int:
                    best = max(best, v)
                else:
                    stack.append(v)
        elif isinstance(node, list | tuple):
            stack.extend(node[:100])
        elif (fields := _field_names(node)) is not None:
            for name in fields:
                v = getattr(node, name)
                if name in names and type(v) is int:
                    best = max(best, v)
                elif isinstance(v, list | tuple) or _field_names(v) is not None:
                    stack.append(v)
    return best


def server_view(frame: Frame) -> tuple[Any, Any] | None:
    """How the broker parses a Kafka frame: (header, request), or None when it cannot."""
    if frame.port not in KAFKA_PORTS or len(frame.data) < 4:
        return None
    size = int.from_bytes(frame.data[:4], "big", signed=True)
    body = frame.data[4:]
    if size != len(body):
        return None
    try:
        return parse_request(body, allow_trailing_bytes=True)
    except (InvalidRequestError, UnsupportedVersionError):
        return None


def _field_names(obj: Any) -> tuple[str, ...] | None:
    """The fields of a protocol message (a generated `Struct`) or of an attrs object; None for others."""
    if isinstance(obj, Struct):
        return obj.FIELDS
    attributes = getattr(obj, "__attrs_attrs__", None)
    return None if attributes is None else tuple(a.name for a in attributes)


def _error_codes(obj: Any, found: list[int], depth: int = 0) -> None:
    if depth > 8 or obj is None:
        return
    fields = _field_names(obj)
    if fields is None:
        if isinstance(obj, list):
            for item in obj[:10_000]:
                _error_codes(item, found, depth + 1)
        return
    for name in fields:
        value = getattr(obj, name)
        if name == "error_code" and value == -1:
            found.append(value)
        elif isinstance(value, list) or _field_names(value) is not None:
            _error_codes(value, found, depth + 1)


# -- the campaign ----------------------------------------------------------------------------------


class Campaign:
    def __init__(self, config: CampaignConfig) -> None:
        self.config = config
        self.pools = Pools()
        self.report = Report(seed=config.seed, frames_planned=config.frames)
        self.report.tolerated = [bug for bug in config.skip if not bug.skips]
        self.acks: list[Ack] = []
        self.recent: collections.deque[Frame] = collections.deque(maxlen=40)
        self.target: DevTarget | None = None
        self._stop = False
        self._down = False

    def log(self, text: str) -> None:
        if self.config.progress is not None:
            self.config.progress(text)

    async def run(self) -> Report:
        config = self.config
        directory = config.directory or Path(tempfile.mkdtemp(prefix="kraftpy-fuzz-"))
        self.report.directory = str(directory)
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            self.target = target = self.make_target(directory)
            try:
                await target.start(nursery)
            except TargetFailed as exc:
                self.report.add(Finding("start-failed", message=str(exc)))
                return self._finish(started)
            try:
                await self.setup(nursery)
                memory = target.memory_kb()
                self.report.memory["baseline_rss_kb"] = memory.get("VmRSS", 0)
                self.report.memory["baseline_open_files"] = target.open_files()
                self.report.memory["peak_reset"] = target.reset_peak()
                await self.fuzz(nursery)
                await self.final_checks(nursery)
            finally:
                with trio.CancelScope(shield=True):
                    code = await target.stop()
                self.report.target["exit_code"] = code
                if code not in (0, None) and not self._down:
                    self.report.add(Finding("unclean-stop", message=f"exit status {code} after Ctrl-C:\n"
                                            + "\n".join(list(target.tail)[-20:])))
                self._collect_log_findings()
                nursery.cancel_scope.cancel()
        return self._finish(started)

    def make_target(self, directory: Path) -> DevTarget:
        return DevTarget(directory)

    def _finish(self, started: float) -> Report:
        self.report.duration_s = round(time.monotonic() - started, 2)
        if self.config.out is not None:
            self.report.write(self.config.out)
        return self.report

    # -- setup -------------------------------------------------------------------------------------

    async def setup(self, nursery: trio.Nursery) -> None:
        target = self.target
        assert target is not None
        pools = self.pools
        pools.protected = dict(PROTECTED_TOPICS)
        pools.scratch = dict(SCRATCH_TOPICS)
        conn = await KafkaConnection.connect("127.0.0.1", target.port, client_id="kraftpy-fuzz-setup")
        try:
            versions = await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
                client_software_name="kraftpy-fuzz", client_software_version="1"))
            pools.served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            self.report.target["served_apis"] = {ApiKey(k).name: list(v) for k, v in sorted(pools.served.items())}
            async with await KafkaConnection.connect("127.0.0.1", target.controller_port,
                                                     client_id="kraftpy-fuzz-setup") as controller:
                versions = await controller.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
                    client_software_name="kraftpy-fuzz", client_software_version="1"))
            pools.controller_served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            self.report.target["controller_served_apis"] = {
                ApiKey(k).name: list(v) for k, v in sorted(pools.controller_served.items())}
            # Time-based retention would delete acknowledged batches (their timestamps are the seed's,
            # not the clock's): the protected topics keep everything.
            keep = [CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="-1")]
            topics = [CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n, replication_factor=1,
                                                         configs=keep if name in PROTECTED_TOPICS else [])
                      for name, n in {**PROTECTED_TOPICS, **SCRATCH_TOPICS}.items()]
            await conn.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=topics, timeout_ms=30000))
            await self.refresh(nursery, conn)
        finally:
            await conn.aclose()
        self.report.target["protected_topic_ids"] = {n: pools.topic_ids.get(n, b"").hex() for n in PROTECTED_TOPICS}

    async def refresh(self, nursery: trio.Nursery, conn: KafkaConnection | None = None) -> None:
        """Topic ids and the quorum's state, as the generators' pools."""
        target = self.target
        assert target is not None
        own = conn is None
        try:
            if own:
                conn = await KafkaConnection.connect("127.0.0.1", target.port, client_id="kraftpy-fuzz-setup")
            names = [*self.pools.protected, *self.pools.scratch]
            response = await conn.request(ApiKey.METADATA, 12, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=False))
            for topic in response.topics:
                if topic.error_code == 0 and topic.name:
                    self.pools.topic_ids[topic.name] = topic.topic_id.bytes
            self.pools.broker_id = response.brokers[0].node_id if response.brokers else 1
        except (ConnectionClosed, OSError, InvalidResponseError):
            pass
        finally:
            if own and conn is not None:
                await conn.aclose()
        with trio.move_on_after(5):
            async with trio.open_nursery() as inner:
                client = ControlClient(inner, "127.0.0.1", target.controller_port, request_timeout=3)
                try:
                    status = await client.request("QuorumStatus", {})
                    self.pools.cluster_id = status.get("cluster_id", self.pools.cluster_id)
                    self.pools.raft_epoch = int(status.get("leader_epoch", 0))
                    self.pools.raft_leader = int(status.get("leader_id", 1))
                    self.pools.raft_high_watermark = int(status.get("high_watermark", 0))
                    voters = status.get("voters") or []
                    if voters:
                        self.pools.voters = tuple(int(v["id"]) for v in voters)
                        self.pools.raft_end_offset = max(int(v["log_end_offset"]) for v in voters)
                except (RpcError, KeyError, TypeError, ValueError):
                    pass
                finally:
                    await client.aclose()
                    inner.cancel_scope.cancel()

    # -- fuzzing -----------------------------------------------------------------------------------

    def _indexes(self) -> list[int]:
        if self.config.indexes is not None:
            return list(self.config.indexes)
        return list(range(self.config.first, self.config.first + self.config.frames))

    async def fuzz(self, nursery: trio.Nursery) -> None:
        config = self.config
        indexes = self._indexes()
        for start in range(0, len(indexes), config.chunk):
            chunk = indexes[start:start + config.chunk]
            await self.refresh(nursery)
            frames = []
            for index in chunk:
                frame = make_frame(config.seed, index, self.pools, config.control_share,
                                   config.controller_kafka_share)
                if config.classes is not None and frame.klass not in config.classes:
                    continue
                if "touches-protected" in frame.tags:
                    self.report.count(frame, "skipped")
                    self.report.skipped_by_bug["touches-protected-topics"] += 1
                    continue
                skipped = next((bug for bug in config.skip if bug.skips and bug.matches(frame.tags)), None)
                if skipped is not None:
                    self.report.count(frame, "skipped")
                    self.report.skipped_by_bug[skipped.name] += 1
                    continue
                frames.append(frame)
            await self.send_all(frames)
            await self.check_alive(nursery)
            if self._stop:
                break
            self.sample("frames")

    def sample(self, unit: str, prefix: str = "") -> None:
        """Note the target's resident memory and open files after a chunk, and log them (``unit``: what
        was sent, frames or attempts)."""
        memory = self.target.memory_kb()
        self.report.rss_samples.append((self.report.frames_sent, memory.get("VmRSS", 0)))
        self.report.fd_samples.append((self.report.frames_sent, self.target.open_files()))
        self.log(f"{prefix}{self.report.frames_sent} {unit}, rss {memory.get('VmRSS', 0) // 1024} MiB, "
                 f"{len(self.report.findings)} findings")

    async def send_all(self, frames: list[Frame]) -> None:
        iterator = iter(frames)

        async def worker() -> None:
            for frame in iterator:
                if self._down:
                    return
                await self.send_one(frame)

        async with trio.open_nursery() as workers:
            for _ in range(self.config.workers):
                workers.start_soon(worker)

    async def send_one(self, frame: Frame) -> None:
        target = self.target
        assert target is not None
        view = server_view(frame) if frame.port in KAFKA_PORTS else None
        if frame.port in KAFKA_PORTS:
            wait_ms = _wait_ms(view[1], kafka_gen.WAIT_FIELDS) if view is not None else 0
            port = target.port if frame.port == KAFKA else target.controller_port
        else:
            try:
                tree = msgpack.unpackb(frame.data[4:], raw=False, strict_map_key=False)
            except Exception:
                tree = None
            wait_ms = _wait_ms(tree, {"max_wait_ms"})
            port = target.controller_port
        long_poll = wait_ms > LONG_POLL_MS
        bound = self.config.hang_bound + min(wait_ms, LONG_POLL_MS) / 1000
        self.recent.append(frame)
        outcome = await send_frame(port, frame, bound, long_poll)
        if outcome.kind == "down":
            self._down = True
            return
        self.report.frames_sent += 1
        self.report.count(frame, outcome.kind)
        self.report.timed(frame, outcome.elapsed)
        if outcome.local_port is not None:
            self.report.note_port(outcome.local_port, frame)
        if outcome.kind == "hang":
            self.report.add(Finding("hang", frame, f"no answer nor close within {bound:.1f}s"))
        elif outcome.kind == "answered":
            if frame.port in KAFKA_PORTS:
                self.judge_kafka(frame, view, outcome.answer or b"")
            else:
                self.judge_control(frame, outcome.answer or b"")

    def judge_kafka(self, frame: Frame, view: tuple[Any, Any] | None, answer: bytes) -> None:
        if view is None:
            # Answered although the broker could not parse it: only UNSUPPORTED_VERSION answers are.
            self.report.count(frame, "answered-unparsed")
            return
        header, request = view
        api_key, version = header.request_api_key, header.request_api_version
        try:
            response_header, response = decode_response(api_key, version, answer)
        except InvalidResponseError as exc:
            self.report.add(Finding("malformed-response", frame, str(exc)))
            return
        if response_header.correlation_id != header.correlation_id:
            self.report.add(Finding("wrong-correlation-id", frame,
                                    f"answer for {response_header.correlation_id}, asked {header.correlation_id}"))
        errors: list[int] = []
        _error_codes(response, errors)
        if errors:
            self.report.add(Finding("unknown-server-error", frame, f"{len(errors)} UNKNOWN_SERVER_ERROR in the answer"))
        if api_key == ApiKey.PRODUCE and request.acks != 0 and frame.port == KAFKA:
            self._collect_acks(frame, request, response)

    def _collect_acks(self, frame: Frame, request: Any, response: Any) -> None:
        sent: dict[tuple[str, int], list[bytes | None]] = collections.defaultdict(list)
        for topic in request.topic_data or ():
            for data in topic.partition_data or ():
                sent[(topic.name, data.index)].append(None if data.records is None else bytes(data.records))
        taken: collections.Counter[tuple[str, int]] = collections.Counter()
        for topic in response.responses or ():
            for result in topic.partition_responses or ():
                key = (topic.name, result.index)
                i = taken[key]
                taken[key] += 1
                if result.error_code != 0 or result.base_offset < 0:
                    continue
                batches = sent.get(key, [])
                if i >= len(batches) or batches[i] is None:
                    self.report.add(Finding("ack-without-batch", frame, f"{key} acknowledged at {result.base_offset}"))
                    continue
                self.acks.append(Ack(topic.name, result.index, result.base_offset, batches[i], frame.index))
                self.report.tags_of[frame.index] = frame.tags
                self.report.acks[frame.klass] += 1

    def judge_control(self, frame: Frame, answer: bytes) -> None:
        try:
            reply = msgpack.unpackb(answer, raw=False, strict_map_key=False)
        except Exception as exc:
            self.report.add(Finding("malformed-response", frame, f"control answer is not msgpack: {exc}"))
            return
        if not isinstance(reply, dict) or "id" not in reply or ("body" not in reply and "error" not in reply):
            self.report.add(Finding("malformed-response", frame, f"control answer {reply!r:.100}"))
            return
        if reply.get("error") == "UNKNOWN_SERVER_ERROR":
            self.report.add(Finding("unknown-server-error", frame, str(reply.get("message"))[:300]))
        elif "error" in reply:
            self.report.control_errors[str(reply["error"])] += 1

    async def check_alive(self, nursery: trio.Nursery) -> None:
        target = self.target
        assert target is not None
        if target.alive and not self._down:
            return
        with trio.move_on_after(5):
            await target.process.wait()
        suspects = [f.index for f in self.recent]
        self.report.add(Finding(
            "crash", None, f"exit status {target.returncode}; suspects (frames sent last): {suspects}\n"
            + "\n".join(list(target.tail)[-25:]), suspects=suspects))
        self._down = False
        if not self.config.restart_on_crash:
            self._stop = True
            return
        try:
            await target.start(nursery)
        except TargetFailed as exc:
            self.report.add(Finding("restart-failed", None, str(exc)))
            self._stop = True
            self._down = True
            return
        self.report.target["restarts"] = self.report.target.get("restarts", 0) + 1
        self.recent.clear()

    # -- the end -----------------------------------------------------------------------------------

    async def final_checks(self, nursery: trio.Nursery) -> None:
        target = self.target
        assert target is not None
        if self.config.settle:
            await trio.sleep(self.config.settle)
        await self.check_alive(nursery)
        if self._down:
            return
        memory = target.memory_kb()
        self.report.memory["final_rss_kb"] = memory.get("VmRSS", 0)
        self.report.memory["peak_rss_kb"] = memory.get("VmHWM", 0)
        self._check_memory()
        try:
            judged = set(PROTECTED_TOPICS) - await self._breached_topics()
            problems, summary = await check_acks("127.0.0.1", target.port, self.acks, judged)
        except (ConnectionClosed, OSError, InvalidResponseError, trio.BrokenResourceError) as exc:
            await self.check_alive(nursery)
            self.report.add(Finding("verify-failed", None, f"reading the acknowledged batches back failed: {exc}"))
            return
        self.report.verification = summary
        for problem in problems:
            self.report.add(Finding(problem.kind, None, f"{problem.ack.topic}-{problem.ack.partition}: "
                                    f"{problem.message}", frame_index=problem.ack.frame,
                                    klass=self.report.klass_of.get(problem.ack.frame)),
                            self.report.tags_of.get(problem.ack.frame))
        after = target.memory_kb()
        if after:
            self.report.memory["after_verify_rss_kb"] = after.get("VmRSS", 0)
        await self.check_alive(nursery)  # a crash that came while the partitions were read back

    def _check_memory(self) -> None:
        """Memory and descriptors: what the run left behind, and whether it was still growing.

        A quarter into the run the broker holds what the campaign's topics and producers cost; from
        there to the end, resident memory must not keep growing (a leak grows with the frames) and
        descriptors must come back to about where they were."""
        memory, config, samples = self.report.memory, self.config, self.report.rss_samples
        baseline = memory.get("baseline_rss_kb", 0)
        final = memory.get("final_rss_kb", 0)
        growth = final - baseline
        if growth > config.rss_growth_limit_mib * 1024:
            self.report.add(Finding("rss-growth", None, f"resident memory grew by {growth // 1024} MiB over the run "
                                    f"(limit {config.rss_growth_limit_mib} MiB); samples (frames, KiB): "
                                    f"{samples[-10:]}"))
        if len(samples) >= 8:
            quarter = samples[len(samples) // 4][1]
            late = final - quarter
            if late > config.rss_late_growth_limit_mib * 1024:
                self.report.add(Finding("rss-growth", None, f"resident memory still grew by {late // 1024} MiB "
                                        f"after the first quarter of the run (limit "
                                        f"{config.rss_late_growth_limit_mib} MiB): {samples[::max(1, len(samples) // 10)]}"))
        files = self.target.open_files()
        memory["final_open_files"] = files
        if files > memory.get("baseline_open_files", 0) + config.open_files_growth_limit:
            self.report.add(Finding("open-files-growth", None, f"{files} descriptors open at the end, "
                                    f"{memory.get('baseline_open_files', 0)} after setup; samples (frames, fds): "
                                    f"{self.report.fd_samples[::max(1, len(self.report.fd_samples) // 10)]}"))
        peak = memory.get("peak_rss_kb", 0) - baseline
        if memory.get("peak_reset") and peak > config.rss_peak_limit_mib * 1024:
            self.report.add(Finding("rss-peak", None, f"resident memory peaked {peak // 1024} MiB above the "
                                    f"baseline (limit {config.rss_peak_limit_mib} MiB)"))

    async def _breached_topics(self) -> set[str]:
        """Protected topics someone deleted or recreated anyway (their acknowledgements are not judged)."""
        target = self.target
        breached: set[str] = set()
        try:
            conn = await KafkaConnection.connect("127.0.0.1", target.port, client_id="kraftpy-fuzz-verify")
        except ConnectionClosed:
            return breached
        try:
            response = await conn.request(ApiKey.METADATA, 12, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in PROTECTED_TOPICS],
                allow_auto_topic_creation=False))
            for topic in response.topics:
                before = self.report.target["protected_topic_ids"].get(topic.name)
                if topic.error_code != 0 or topic.topic_id.bytes.hex() != before:
                    breached.add(topic.name)
            every = await conn.request(ApiKey.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False))
            self.report.target["topics_at_end"] = len(every.topics)
            self.report.target["partitions_at_end"] = sum(len(t.partitions) for t in every.topics)
        finally:
            await conn.aclose()
        if breached:
            self.report.add(Finding("protected-topic-changed", None, f"{sorted(breached)} deleted or recreated "
                                    "during the run: their acknowledgements are not judged"))
        return breached

    def _collect_log_findings(self) -> None:
        target = self.target
        assert target is not None
        for (level, event), count in sorted(target.events.items()):
            self.report.log_events[f"{level}: {event}"] = count
            kind = NOTABLE_EVENTS.get(event)
            if kind is None and level in ("error", "critical", "exception"):
                kind = "server-error-log"
            if level == "raw":
                kind = "raw-output"
            if kind is None:
                continue
            samples = target.samples.get((level, event), [])
            frames = sorted({f for s in samples for f in [self.report.frame_of_peer(s.get("peer"))] if f is not None})
            self.report.add(Finding(kind, None, f"{count} x {event!r}; samples: {samples[:3]}",
                                    suspects=frames or None))


async def run_campaign(config: CampaignConfig) -> Report:
    return await Campaign(config).run()
