"""A handshake campaign: the SASL and TLS handshakes of a secured ``kraftpy dev``, attempt after attempt.

Theory of operation
-------------------
The same campaign as the frames' (`tests.fuzz.campaign.Campaign`: chunks, workers, a crash check after
each chunk and a restart on the same directory, RSS and descriptor samples, the JSON report), with a
`SecureDevTarget` and attempts (`handshake_gen`) instead of frames:

1. Set up: the target's versions (ApiVersions on its PLAINTEXT listener), a topic, and a legitimate
   login and produce on each secured listener (what must still work at the end).
2. Each attempt opens a fresh connection to its listener (with its TLS client, if any), runs its
   script, and ends ``served``, ``refused``, ``answered``, ``closed`` or ``hang`` (neither answer nor
   close within the bound; an attempt that stalls a TLS handshake on purpose gets the broker's
   handshake timeout on top). Judged: ``legit-refused`` (an attempt that must be served was not),
   ``auth-bypass`` (a request served after an exchange that must fail, or after a refusal),
   ``not-closed`` (a connection that must be closed was answered), and the answers' own faults
   (``malformed-response``, ``wrong-correlation-id``, ``unknown-server-error``).
3. At the end: memory (start, peak, end, growth per 10,000 attempts), then a legitimate SCRAM client
   logs in and produces on SASL_SSL and SASL_PLAINTEXT, a PLAIN and an OAUTHBEARER client on
   SASL_PLAINTEXT, and a mutual-TLS client on MTLS (``login-failed`` if one cannot), the process must
   still live, and Ctrl-C must stop it cleanly.
"""

from __future__ import annotations

import time
from pathlib import Path

import attrs
import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode, InvalidResponseError
from kraftpy.protocol.messages import ApiVersionsRequest, CreateTopicsRequest, FetchRequest, ProduceRequest
from kraftpy.protocol.records import SimpleRecord, build_batch, decode_batch
from kraftpy.rpc.kafka_server import TLS_HANDSHAKE_TIMEOUT_S
from tests.fuzz.campaign import Campaign, CampaignConfig
from tests.fuzz.handshake_gen import Attempt, Ctx, Unexpected, _login, make_attempt
from tests.fuzz.report import Finding
from tests.fuzz.secure_target import SecureDevTarget
from tests.fuzz.wire import Closed, Silent, Wire

TOPIC = "fuzz-handshake"
#: The most one attempt may take in all (each wait for the broker has the hang bound).
ATTEMPT_BOUND_S = 120.0
#: Logins checked before and after the campaign: (name, listener, mechanism or None for mutual TLS).
LOGINS = (("SCRAM-SHA-512 over SASL_SSL", "SASL_SSL", "SCRAM-SHA-512"),
          ("SCRAM-SHA-256 over SASL_PLAINTEXT", "SASL_PLAINTEXT", "SCRAM-SHA-256"),
          ("PLAIN over SASL_SSL", "SASL_SSL", "PLAIN"),
          ("OAUTHBEARER over SASL_PLAINTEXT", "SASL_PLAINTEXT", "OAUTHBEARER"),
          ("mutual TLS", "MTLS", None))


@attrs.define
class HandshakeConfig(CampaignConfig):
    workers: int = 16
    chunk: int = 500


class HandshakeCampaign(Campaign):
    def __init__(self, config: HandshakeConfig) -> None:
        super().__init__(config)
        self.report.replay_command = "python -m tests.fuzz handshakes --seed {seed} --first {index} --attempts 1"
        self.contexts: dict[str, object] = {}

    def make_target(self, directory: Path) -> SecureDevTarget:
        return SecureDevTarget(directory)

    async def setup(self, nursery: trio.Nursery) -> None:
        target = self.target
        conn = await KafkaConnection.connect("127.0.0.1", target.port, client_id="kraftpy-fuzz-setup")
        try:
            versions = await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
                client_software_name="kraftpy-fuzz", client_software_version="1"))
            self.pools.served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            await conn.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[
                CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)],
                timeout_ms=30000))
        finally:
            await conn.aclose()
        pki = target.pki
        self.contexts = {"trusted": pki.client_context(), "client": pki.client_context("client"),
                         "stranger": pki.client_context("stranger"), "tls12": pki.client_context(tls12=True),
                         "untrusting": pki.client_context(trust=False)}
        # On the mutual-TLS listener a client presents its certificate, whatever else it does.
        self.contexts["tls12-client"] = pki.client_context("client", tls12=True)
        self.contexts["untrusting-client"] = pki.client_context("client", trust=False)
        self.report.target["listeners"] = dict(target.ports)
        self.report.target["logins_before"] = await self.logins("before")

    # -- fuzzing -----------------------------------------------------------------------------------

    async def fuzz(self, nursery: trio.Nursery) -> None:
        config = self.config
        indexes = self._indexes()
        seen = 0
        for start in range(0, len(indexes), config.chunk):
            attempts = []
            for index in indexes[start:start + config.chunk]:
                attempt = make_attempt(config.seed, index)
                if config.classes is None or attempt.klass in config.classes or attempt.klass.split(":")[0] in config.classes:
                    attempts.append(attempt)
            await self.send_all(attempts)
            await self.check_alive(nursery)
            if self._stop:
                break
            self.sample("attempts", prefix=f"{time.strftime('%H:%M:%S')} ")
            for finding in self.report.findings[seen:]:  # as they come: a long run can be judged while it runs
                self.log(f"  {finding.kind} [{finding.klass}] attempt {finding.frame_index}: {finding.message[:300]}")
            seen = len(self.report.findings)

    async def send_one(self, attempt: Attempt) -> None:
        port = self.target.ports[attempt.port]
        # A hang is the broker owing an answer (or a close) and giving neither within the bound: each
        # wait for it is bounded, not the attempt (a client writing one byte at a time is slow itself).
        bound = self.config.hang_bound + (TLS_HANDSHAKE_TIMEOUT_S if attempt.stall else 0)
        self.recent.append(attempt)
        context = None
        if attempt.tls is not None:
            mtls = attempt.port == "MTLS" and attempt.tls in ("tls12", "untrusting")
            context = self.contexts[f"{attempt.tls}-client" if mtls else attempt.tls]
        started = time.monotonic()
        try:
            wire = await Wire.open(port, context, attempt.chunk)
        except OSError:
            self._down = True
            return
        wire.wait_bound = bound
        ctx = Ctx(wire, self.pools.served, _script_rng(self.config.seed, attempt.index))
        kind, note = "hang", f"the attempt did not end within {ATTEMPT_BOUND_S:g}s"
        try:
            with trio.move_on_after(ATTEMPT_BOUND_S):
                try:
                    if context is not None and attempt.api != "TLS":  # SASL_SSL: TLS first, then the exchange
                        await wire.handshake()
                    kind = await attempt.script(ctx)
                    if kind == "refused":  # refused: nothing may be served on this connection afterwards
                        kind = await self._after_refusal(ctx)
                except Closed as exc:
                    kind, note = "closed", str(exc)
                except Silent as exc:
                    kind, note = "hang", str(exc)
                except Unexpected as exc:
                    kind, note = "answered", str(exc)
                except Exception as exc:  # the script's own fault: reported, the campaign goes on
                    kind, note = "harness-error", f"{type(exc).__name__}: {exc}"
                    self.report.add(Finding("harness-error", attempt, note[:500]))
        finally:
            handshake_seconds = wire.handshake_seconds
            attempt.data = b"".join(wire.sent)[:4096]
            local_port = wire.local_port
            await wire.aclose()
        self.report.frames_sent += 1
        self.report.count(attempt, kind)
        self.report.timed(attempt, time.monotonic() - started)
        if local_port is not None:
            self.report.note_port(local_port, attempt)
        for problem, message in ctx.problems:
            self.report.add(Finding(problem, attempt, message))
        if (attempt.expect == "served" and kind == "closed" and handshake_seconds is not None
                and handshake_seconds >= TLS_HANDSHAKE_TIMEOUT_S):
            # The client took longer than the broker's TLS handshake timeout (a loaded fuzzer writing one
            # byte at a time): closing it is the broker's rule, not a refused login.
            self.report.add(Finding("slow-client", attempt, f"TLS handshake of {handshake_seconds:.1f}s closed by "
                                    f"the broker's {TLS_HANDSHAKE_TIMEOUT_S:g}s handshake timeout: {note}"))
            return
        self.judge(attempt, kind, note, bound)

    async def _after_refusal(self, ctx: Ctx) -> str:
        try:
            if await ctx.served_check() == "served":
                return "served-after-refusal"
        except (Closed, Unexpected):
            pass
        return "refused"

    def judge(self, attempt: Attempt, kind: str, note: str, bound: float) -> None:
        expect = attempt.expect
        if kind == "hang":
            self.report.add(Finding("hang", attempt, note))
        elif kind == "served-after-refusal":
            self.report.add(Finding("auth-bypass", attempt, "a request was served after the broker refused the exchange"))
        elif expect == "served" and kind != "served":
            self.report.add(Finding("legit-refused", attempt, f"a legitimate attempt ended {kind}: {note}"[:500]))
        elif expect == "refused" and kind == "served":
            self.report.add(Finding("auth-bypass", attempt, "a request was served after an exchange that must fail"))
        elif expect == "closed" and kind in ("served", "answered"):
            self.report.add(Finding("not-closed", attempt, f"ended {kind} where the connection must be closed"))

    # -- the end -----------------------------------------------------------------------------------

    async def final_checks(self, nursery: trio.Nursery) -> None:
        target = self.target
        if self.config.settle:
            await trio.sleep(self.config.settle)
        await self.check_alive(nursery)
        if self._down:
            return
        memory = target.memory_kb()
        self.report.memory["final_rss_kb"] = memory.get("VmRSS", 0)
        self.report.memory["peak_rss_kb"] = memory.get("VmHWM", 0)
        self.report.memory["growth_per_10000_kb"] = growth_per(
            self.report.rss_samples, 10_000, self.report.memory.get("baseline_rss_kb", 0))
        self._check_memory()
        self.report.target["logins_after"] = await self.logins("after")
        await self.check_alive(nursery)

    async def logins(self, when: str) -> dict[str, str]:
        """Each legitimate client logs in, produces one batch (acks=all) and reads it back: ``ok`` or why not."""
        results = {}
        for name, listener, mechanism in LOGINS:
            try:
                with trio.fail_after(30):
                    await self._produce_and_read_back(listener, mechanism, f"{when}: {name}".encode())
                results[name] = "ok"
            except (Closed, Unexpected, OSError, InvalidResponseError, trio.TooSlowError, ValueError) as exc:
                results[name] = f"failed: {type(exc).__name__}: {exc}"
                self.report.add(Finding("login-failed", None, f"{when} the campaign, {name}: {results[name]}"))
        return results

    async def _produce_and_read_back(self, listener: str, mechanism: str | None, value: bytes) -> None:
        context = {"SASL_PLAINTEXT": None, "SASL_SSL": self.contexts["trusted"]}.get(listener, self.contexts["client"])
        wire = await Wire.open(self.target.ports[listener], context)
        try:
            if context is not None:
                await wire.handshake()
            ctx = Ctx(wire, self.pools.served, _script_rng(self.config.seed, -1))
            if mechanism is not None:
                await _login(ctx, mechanism)
            batch = build_batch([SimpleRecord(key=None, value=value)])
            produced = await ctx.request(ApiKey.PRODUCE, 9, ProduceRequest(
                transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
                    name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
            result = produced.responses[0].partition_responses[0]
            if result.error_code != ErrorCode.NONE:
                raise ValueError(f"Produce refused: {ErrorCode(result.error_code).name}")
            fetched = await ctx.request(ApiKey.FETCH, 12, FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[FetchRequest.FetchPartition(
                    partition=0, fetch_offset=result.base_offset, partition_max_bytes=1 << 20)])]))
            data = fetched.responses[0].partitions[0]
            if data.error_code != ErrorCode.NONE or not data.records:
                raise ValueError(f"Fetch at {result.base_offset}: {ErrorCode(data.error_code).name}")
            records = decode_batch(bytes(data.records)).records
            if [r.value for r in records[:1]] != [value]:
                raise ValueError(f"read back {records[:1]!r} at {result.base_offset}, not what was produced")
        finally:
            await wire.aclose()


def _script_rng(seed: int, index: int):
    import random

    return random.Random(f"kraftpy-fuzz-handshake-run:{seed}:{index}")


def growth_per(samples: list[tuple[int, int]], step: int, baseline: int) -> list[tuple[int, int]]:
    """(attempts, KiB grown since the previous step) at each multiple of ``step`` the samples reach."""
    out = []
    previous = baseline
    mark = step
    for count, rss in samples:
        if count >= mark:
            out.append((mark, rss - previous))
            previous = rss
            mark += step
    return out


async def run_handshake_campaign(config: HandshakeConfig):
    return await HandshakeCampaign(config).run()
