"""After the fuzzing: is every acknowledged batch there, readable, and what was sent?

A consumer reads a partition from offset 0, batch after batch, moving to each batch's next offset
(base offset + last_offset_delta + 1), and stops at the first batch it cannot decode. `read_partition`
does the same through Fetch, but goes on past a bad batch (by its length and next offset) to see what
lies behind it. `check_acks` then judges every acknowledgement:

* ``acked-missing``: no batch at the acknowledged base offset;
* ``acked-unreadable``: the batch is there but does not decode (CRC, codec, records);
* ``acked-behind-poison``: it decodes, but a batch a consumer cannot read comes before it;
* ``acked-different``: it decodes to other records than the ones sent;
* ``log-inconsistent``: batches overlap, or records' offsets fall outside their batch.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.batch_header import LOG_OVERHEAD, CorruptRecordError, read_header
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchRequest, ListOffsetsRequest, MetadataRequest
from kraftpy.protocol.records import decode_batch


@attrs.define
class Ack:
    """A Produce the broker answered with no error: what it was sent and the base offset it named."""

    topic: str
    partition: int
    base_offset: int
    batch: bytes
    frame: int


@attrs.define
class StoredBatch:
    base_offset: int
    next_offset: int
    data: bytes
    records: Any = None
    error: str | None = None


@attrs.define
class PartitionLog:
    batches: list[StoredBatch] = attrs.Factory(list)
    #: Base offset of the first batch a consumer cannot read, if any.
    poison: int | None = None
    log_start_offset: int = 0
    high_watermark: int = 0
    error: str | None = None
    problems: list[str] = attrs.Factory(list)


def _records_key(decoded: Any) -> list[tuple]:
    return [(r.offset - decoded.header.base_offset, r.timestamp, r.key, r.value, r.headers) for r in decoded.records]


def decode_stored(data: bytes) -> tuple[Any, str | None]:
    try:
        return decode_batch(data), None
    except (CorruptRecordError, ValueError) as exc:
        return None, str(exc)


async def wait_for_leaders(conn: KafkaConnection, topics: list[str], timeout: float = 30.0) -> bool:
    """Until every partition of ``topics`` has a leader (the broker serving again after a fault)."""
    with trio.move_on_after(timeout):
        while True:
            request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                                      allow_auto_topic_creation=False)
            response = await conn.request(ApiKey.METADATA, 12, request)
            if all(t.error_code == 0 and t.partitions and all(p.leader_id >= 0 for p in t.partitions)
                   for t in response.topics):
                return True
            await trio.sleep(0.2)
    return False


async def earliest_offset(conn: KafkaConnection, topic: str, partition: int) -> int:
    response = await conn.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-2)])]))
    result = response.topics[0].partitions[0]
    return result.offset if result.error_code == ErrorCode.NONE else 0


async def read_partition(conn: KafkaConnection, topic: str, partition: int, *, max_batches: int = 200_000) -> PartitionLog:
    log = PartitionLog()
    offset = 0
    seen = 0
    while seen < max_batches:
        request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
                               topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                                   FetchRequest.FetchPartition(partition=partition, fetch_offset=offset,
                                                               partition_max_bytes=16 << 20)])])
        response = await conn.request(ApiKey.FETCH, 12, request)
        data = response.responses[0].partitions[0]
        if data.error_code != ErrorCode.NONE:
            if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset >= log.high_watermark > 0:
                break
            if data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and offset == 0 and not log.batches:
                # The log no longer starts at 0: read what is left, from its start.
                start = await earliest_offset(conn, topic, partition)
                if start > 0:
                    log.log_start_offset = offset = start
                    log.problems.append(f"the log starts at {start}, not 0")
                    continue
            log.error = f"fetch at offset {offset}: {ErrorCode(data.error_code).name}"
            break
        log.high_watermark = data.high_watermark
        log.log_start_offset = data.log_start_offset
        raw = bytes(data.records or b"")
        pos = 0
        progressed = False
        while len(raw) - pos >= LOG_OVERHEAD:
            try:
                header = read_header(raw, pos)
            except CorruptRecordError as exc:
                log.problems.append(f"unreadable batch header at offset {offset}: {exc}")
                log.poison = offset if log.poison is None else log.poison
                return log
            if len(raw) - pos < header.size:
                break  # a partial batch at the end of the response
            chunk = raw[pos:pos + header.size]
            pos += header.size
            seen += 1
            if header.next_offset <= offset:
                continue  # a batch before the fetch offset (the fetch began inside it)
            decoded, error = decode_stored(chunk)
            stored = StoredBatch(header.base_offset, header.next_offset, chunk, decoded, error)
            if error is None:
                offsets = [r.offset for r in decoded.records]
                if len(offsets) != header.record_count or any(
                        not header.base_offset <= o < header.next_offset for o in offsets) or offsets != sorted(set(offsets)):
                    stored.error = (f"records' offsets {offsets[:5]}... do not fit batch "
                                    f"{header.base_offset}..{header.next_offset - 1} of {header.record_count} records")
            if log.batches and header.base_offset < log.batches[-1].next_offset:
                log.problems.append(f"batch at {header.base_offset} overlaps the one at {log.batches[-1].base_offset}")
            if stored.error is not None and log.poison is None:
                log.poison = header.base_offset
            log.batches.append(stored)
            offset = header.next_offset
            progressed = True
        if offset >= log.high_watermark or not progressed:
            if not progressed and offset < log.high_watermark:
                log.problems.append(f"fetch at offset {offset} returned no whole batch below the high watermark "
                                    f"{log.high_watermark}")
                log.poison = offset if log.poison is None else log.poison
            break
    return log


@attrs.define
class AckProblem:
    kind: str
    ack: Ack
    message: str


def judge(acks: list[Ack], log: PartitionLog) -> list[AckProblem]:
    problems = []
    by_base = {b.base_offset: b for b in log.batches}
    for ack in acks:
        stored = by_base.get(ack.base_offset)
        if stored is None:
            where = f"log {log.log_start_offset}..{log.high_watermark}"
            if ack.base_offset < log.log_start_offset:
                where += ": deleted below the log start offset"
            problems.append(AckProblem("acked-missing", ack, f"no batch at offset {ack.base_offset} ({where}"
                                       f"{'; ' + log.error if log.error else ''})"))
            continue
        if stored.error is not None:
            problems.append(AckProblem("acked-unreadable", ack, f"batch at {ack.base_offset}: {stored.error}"))
            continue
        if log.poison is not None and log.poison < ack.base_offset:
            problems.append(AckProblem("acked-behind-poison", ack,
                                       f"batch at {ack.base_offset} lies behind an unreadable batch at {log.poison}"))
        sent, error = decode_stored(ack.batch)
        if sent is None:
            # The broker acknowledged a batch that does not decode, yet it reads back: it must be other bytes.
            problems.append(AckProblem("acked-different", ack, f"sent batch does not decode ({error}) but "
                                       f"the stored one does"))
            continue
        if stored.data[8:12] + stored.data[16:] == ack.batch[8:12] + ack.batch[16:]:
            continue
        if _records_key(sent) != _records_key(stored.records):
            problems.append(AckProblem("acked-different", ack, f"batch at {ack.base_offset} holds other records"))
    return problems


async def check_acks(host: str, port: int, acks: list[Ack], topics: set[str]) -> tuple[list[AckProblem], dict]:
    """Read every partition of ``topics`` with acknowledgements and judge them; returns (problems,
    summary). Other topics are not judged: a request may have deleted them since (and made them
    again), and a consumer has nothing to read back then."""
    by_partition: dict[tuple[str, int], list[Ack]] = {}
    for ack in acks:
        if ack.topic in topics:
            by_partition.setdefault((ack.topic, ack.partition), []).append(ack)
    summary: dict[str, Any] = {"acks": len(acks), "checked": sum(len(v) for v in by_partition.values()),
                               "partitions": len(by_partition), "log_problems": []}
    problems: list[AckProblem] = []
    try:
        conn = await KafkaConnection.connect(host, port, client_id="kraftpy-fuzz-verify")
    except ConnectionClosed as exc:
        summary["error"] = str(exc)
        return [AckProblem("acked-missing", a, f"broker unreachable: {exc}") for v in by_partition.values()
                for a in v], summary
    try:
        topics = sorted({t for t, _ in by_partition})
        summary["leaders"] = await wait_for_leaders(conn, topics) if topics else True
        for (topic, partition), partition_acks in sorted(by_partition.items()):
            log = await read_partition(conn, topic, partition)
            problems += judge(partition_acks, log)
            summary["log_problems"] += [f"{topic}-{partition}: {p}" for p in log.problems[:5]]
    finally:
        await conn.aclose()
    return problems, summary
