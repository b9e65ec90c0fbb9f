"""What the fuzzer found, replayed from tests/fuzz/findings/ against a fresh ``kraftpy dev``.

A finding still open is a strict xfail naming its bug and where the fix belongs: once the fix lands
the test passes, the xfail turns red (XPASS), and ``"open": true`` comes out of the file.
"""

from __future__ import annotations

import struct

import pytest
import trio

from tests.fuzz.replay import all_findings, load, replay_finding
from tests.fuzz.target import DevTarget

pytestmark = pytest.mark.slow


def _params():
    for path in all_findings():
        finding = load(path)
        marks = []
        if finding.get("open"):
            marks.append(pytest.mark.xfail(strict=True, reason=f"open: {finding['what']} -- fix: {finding['fix']}"))
        yield pytest.param(path, id=finding["name"], marks=marks)


@pytest.mark.parametrize("path", list(_params()))
async def test_a_finding_replayed(path, tmp_path):
    failures = await replay_finding(load(path), tmp_path / "dev")
    assert not failures, "\n".join(failures)


async def test_frames_naming_many_api_keys_cost_no_memory_for_good(tmp_path):
    """Found by python -m tests.fuzz run --seed 1 --frames 100000: resident memory grew all run long;
    bytes:random and header:api-key frames name random api keys."""
    async with trio.open_nursery() as nursery:
        target = DevTarget(tmp_path / "dev")
        await target.start(nursery)
        try:
            async def send(api_key: int) -> None:
                stream = await trio.open_tcp_stream("127.0.0.1", target.port)
                async with stream:
                    body = struct.pack(">hhi", api_key, 0, 1) + b"\x00\x00"
                    await stream.send_all(struct.pack(">i", len(body)) + body)
                    await stream.send_eof()
                    await stream.receive_some(16)  # the close

            # Unknown keys first, enough for the process's memory to settle: the first label's cost, and
            # the garbage a node process lets build up between two young collections (10,000
            # allocations: kraftpy.node.kraft_node.GC_THRESHOLDS), are not counted.
            for api_key in range(-32768, -32768 + 2_000):
                await send(api_key)
            before = target.memory_kb()["VmRSS"]
            for api_key in range(-32768 + 2_000, -32768 + 12_000):
                await send(api_key)
            grown = target.memory_kb()["VmRSS"] - before
        finally:
            await target.stop()
            nursery.cancel_scope.cancel()
    assert grown < 2048, f"resident memory grew by {grown} KiB"
