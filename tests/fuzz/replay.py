"""Reproducers of what the fuzzer found, kept as files in tests/fuzz/findings/ and replayed here.

A finding file is JSON::

    {"name": "...", "what": "what goes wrong", "found": "how the fuzzer found it",
     "fix": "where the fix belongs", "open": true,
     "frames": [{"port": "kafka" | "control", "hex": "...", "note": "what this frame is"}, ...],
     (a large frame may be given as "zlib_base64": its bytes zlib-compressed, in base64)
     "expect": ["answered:1", "alive", "no-handler-traceback", "rss-below-mib:256", "readable:t", "clean-stop"]}

A finding with ``"target": "secure"`` is replayed on the secured target of the handshake fuzzing, and
its frames may also name the port ``SASL_PLAINTEXT``.

`replay_finding` starts a fresh ``kraftpy dev``, sends each frame on a fresh connection in order
(waiting for its answer or close), then checks every expectation and returns the ones that fail:

* ``answered:N``: frame N (from 0) got an answer, not a closed connection or silence;
* ``alive``: the process still runs and answers ApiVersions;
* ``no-handler-traceback``: the log has no handler failure (a traceback) at error level;
* ``rss-below-mib:N``: resident memory grew by less than N MiB;
* ``readable:TOPIC``: partition 0 of TOPIC reads from offset 0 with no unreadable batch;
* ``clean-stop``: Ctrl-C ends the process with status 0.

``"open": true`` marks a bug not fixed yet: test_findings.py expects it to fail (strict xfail), so
the file says "open" exactly as long as the bug is there.
"""

from __future__ import annotations

import base64
import json
import tempfile
import zlib
from pathlib import Path
from typing import Any

import trio

from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import ApiVersionsRequest
from tests.fuzz.campaign import send_frame
from tests.fuzz.frames import CONTROL, CONTROLLER_KAFKA, KAFKA, KAFKA_PORTS, Frame
from tests.fuzz.target import DevTarget
from tests.fuzz.verify import read_partition

FINDINGS = Path(__file__).parent / "findings"
BOUND = 20.0


#: Ports of a finding with ``"target": "secure"`` (`tests.fuzz.secure_target.SecureDevTarget`'s listeners):
#: the bytes go there as they are (SASL_PLAINTEXT; several requests may share one connection's bytes).
SECURE_PORTS = ("SASL_PLAINTEXT",)


def load(path: Path) -> dict[str, Any]:
    finding = json.loads(path.read_text())
    ports = (*KAFKA_PORTS, CONTROL, *SECURE_PORTS) if finding.get("target") == "secure" else (*KAFKA_PORTS, CONTROL)
    for frame in finding["frames"]:
        assert frame["port"] in ports, path
    return finding


def frame_bytes(spec: dict[str, Any]) -> bytes:
    if "zlib_base64" in spec:
        return zlib.decompress(base64.b64decode(spec["zlib_base64"]))
    return bytes.fromhex(spec["hex"])


def all_findings() -> list[Path]:
    return sorted(FINDINGS.glob("*.json"))


async def replay_finding(finding: dict[str, Any], directory: Path | None = None) -> list[str]:
    """Replay on a fresh target; the expectations that fail, as lines (empty: all hold)."""
    directory = directory or Path(tempfile.mkdtemp(prefix="kraftpy-finding-"))
    failures: list[str] = []
    async with trio.open_nursery() as nursery:
        if finding.get("target") == "secure":
            from tests.fuzz.secure_target import SecureDevTarget

            target = SecureDevTarget(directory)
        else:
            target = DevTarget(directory)
        await target.start(nursery)
        before = target.memory_kb().get("VmRSS", 0)
        outcomes = []
        try:
            for i, spec in enumerate(finding["frames"]):
                data = frame_bytes(spec)
                frame = Frame(index=i, port=spec["port"], api=spec.get("note", ""), klass="finding", detail="",
                              data=data, half_close=spec.get("half_close", spec["port"] in KAFKA_PORTS))
                port = (target.port if frame.port == KAFKA
                        else target.controller_port if frame.port in (CONTROL, CONTROLLER_KAFKA)
                        else target.ports[frame.port])
                outcomes.append(await send_frame(port, frame, BOUND, long_poll=False))
            grown = target.memory_kb().get("VmRSS", 0) - before
            for expectation in finding["expect"]:
                problem = await _check(expectation, target, outcomes, grown)
                if problem:
                    failures.append(f"{expectation}: {problem}")
        finally:
            code = await target.stop()
            nursery.cancel_scope.cancel()
        if "clean-stop" in finding["expect"] and code != 0:
            failures.append(f"clean-stop: exit status {code}: " + " | ".join(list(target.tail)[-3:]))
    return failures


async def _check(expectation: str, target: DevTarget, outcomes: list, grown_kb: int) -> str | None:
    kind, _, arg = expectation.partition(":")
    if kind == "answered":
        outcome = outcomes[int(arg)]
        return None if outcome.kind == "answered" else f"frame {arg}: {outcome.kind}"
    if kind == "alive":
        if not target.alive:
            return f"exit status {target.returncode}: " + " | ".join(list(target.tail)[-3:])
        try:
            async with await KafkaConnection.connect("127.0.0.1", target.port) as conn:
                with trio.fail_after(BOUND):
                    await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
                        client_software_name="finding", client_software_version="1"))
        except (ConnectionClosed, trio.TooSlowError) as exc:
            return f"no answer to ApiVersions: {exc!r}"
        return None
    if kind == "no-handler-traceback":
        failed = {event: n for (level, event), n in target.events.items()
                  if level == "error" and "failed" in event}
        return f"{failed}" if failed else None
    if kind == "rss-below-mib":
        return None if grown_kb < int(arg) * 1024 else f"grew {grown_kb // 1024} MiB"
    if kind == "readable":
        try:
            async with await KafkaConnection.connect("127.0.0.1", target.port) as conn:
                log = await read_partition(conn, arg, 0)
        except ConnectionClosed as exc:
            return str(exc)
        if log.error or log.poison is not None or log.problems or not log.batches:
            return f"{log.error} poison={log.poison} {log.problems[:2]} batches={len(log.batches)}"
        return None
    if kind == "clean-stop":
        return None  # judged after the stop
    raise ValueError(f"unknown expectation {expectation!r}")
