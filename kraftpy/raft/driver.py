"""The trio driver of a `RaftCore`: the only code that awaits on the core's behalf.

Theory of operation. The core is a pure state machine; the driver feeds it and carries out what it
asks, in order:

- time: one task waits until ``core.next_deadline()`` (or until something else touched the core)
  and calls ``tick``;
- inbound requests arrive through the control-plane server (`handle_request`): the driver gives
  each a fresh correlation id, steps the core, and answers with the response the core addresses
  to that (source, correlation id) — at once, or later for a held Fetch (long poll);
- outbound requests (``Send`` of a request) go to the destination's address over a
  `ControlClient`, in a task of their own; the answer is stepped into the core with the request's
  correlation id. The address is the core's (`RaftCore.address_of`): the endpoint the voter set in
  the log records (KIP-853), one a leader's message named, a bootstrap server; a voter that moved
  gets a new client. A request that timed out needs no handling here: the core's own timers retry;
  one that could not be delivered at all (connection refused or reset) is reported to the core
  (`RaftCore.unreachable`), which lets a follower of a crashed leader stand for election early;
- ``PersistQuorumState`` and ``FlushLog`` are made durable in a worker thread before the next
  effect is applied, so no message ever vouches for a vote or log entry a crash could lose. They
  are all the file work Raft does: every core call (and so every call into the log the core makes)
  only changes memory, and ``FlushLog`` carries out what it changed (appends, truncations,
  snapshots, prefix deletions; kraftpy.raft.log). Snapshots the state machine takes go the same
  way (`create_snapshot`);
- ``Commit``, ``LeaderChange`` and ``SnapshotLoaded`` go to the listener, in order;
- `propose` hands records to the core, which gathers them for controller.quorum.append.linger.ms
  (RaftConfig.append_linger_ms) and answers at once with the offsets they will take; the timer
  that appends the batch is one of the core's deadlines.
- `add_voter`, `remove_voter` and `upgrade_kraft_version` start an operation in the core under a
  fresh id and wait for the core's ``VoterChangeDone`` of that id (at once for a refusal, when the
  record is committed otherwise).

One lock serialises every core call together with the application of its effects: while a flush
runs in its thread, no other core call starts.

A write that fails (the quorum-state file, or the log's flush: ENOSPC, EIO) is fatal: Raft's safety
rests on what was persisted, and memory has already moved past the disk. The driver keeps the
`FatalError` (naming the file and the errno), applies no effect from then on (nothing is sent on
the strength of the failed write), and its run task raises it, whichever task met it, which stops
the process with that one line.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Protocol

import trio

from kraftpy.fatal import FatalError, storage_failure
from kraftpy.logs import get_logger
from kraftpy.raft import codec
from kraftpy.raft.core import ProposeResult, RaftCore
from kraftpy.raft.effects import (
    Commit,
    Effect,
    FlushLog,
    LeaderChange,
    PersistQuorumState,
    Send,
    SnapshotLoaded,
    VoterChangeDone,
)
from kraftpy.raft.messages import DescribeQuorumResponse, Message, Received
from kraftpy.raft.quorum_state_store import write_quorum_state_file
from kraftpy.raft.validation import RESPONSE_TYPES
from kraftpy.raft.voters import ReplicaKey, VoterNode
from kraftpy.rpc.control import ConnectionLost, ControlClient, RequestTimeout, RpcError
from kraftpy.rpc.wire_schema import INT32

INT32_MAX = INT32.high

RAFT_API = "raft"
#: Correlation ids the driver gives inbound requests; the core numbers its own below 2**31.
_INBOUND_IDS_START = 1 << 32


class RaftListener(Protocol):
    """What the state machine above Raft hears, in log order. Called with the driver's lock held:
    keep it quick and do not call back into the driver."""

    def handle_commit(self, commit: Commit) -> None: ...

    def handle_leader_change(self, change: LeaderChange) -> None: ...

    def handle_snapshot_loaded(self, effect: SnapshotLoaded) -> None: ...


def encode_envelope(source: int, message: Message) -> dict[str, Any]:
    return {"source": source, "message": codec.encode(message)}


def decode_envelope(body: dict[str, Any]) -> tuple[int, Message]:
    """The sender and the message of a ``raft`` request; RpcError INVALID_REQUEST naming what is wrong
    for anything else (a node id is a non-negative int32, the message passes the codec's checks)."""
    source = body.get("source")
    if type(source) is not int or not 0 <= source <= INT32_MAX:
        raise RpcError("INVALID_REQUEST", f"raft: source must be a node id, got {source!r:.40}")
    try:
        return source, codec.decode(body["message"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RpcError("INVALID_REQUEST", f"raft: not a Raft message: {exc}") from None


def decode_response(body: dict[str, Any], request: Message) -> Message:
    """The answer to `request` in `body`; RpcError INVALID_RESPONSE for anything but one of the
    response type that answers it."""
    try:
        response = codec.decode(body["message"])
    except (KeyError, TypeError, ValueError) as exc:
        raise RpcError("INVALID_RESPONSE", f"not a Raft message: {exc}") from None
    expected = RESPONSE_TYPES[type(request)]
    if type(response) is not expected:
        raise RpcError("INVALID_RESPONSE", f"{type(response).__name__} does not answer {type(request).__name__}")
    return response


class RaftDriver:
    def __init__(self, core: RaftCore, *, voter_addresses: dict[int, tuple[str, int]],
                 quorum_state_path: Path, listener: RaftListener, request_timeout: float = 2.0,
                 client_tls: Any = None, client_sasl: Any = None) -> None:
        """``client_tls``: the `kraftpy.security.tls.ClientTls` of the controller listener over TLS;
        ``client_sasl``: the `kraftpy.security.sasl.SaslLogin` of the controller listener over SASL."""
        self.core = core
        self.client_tls = client_tls
        self.client_sasl = client_sasl
        self.voter_addresses = voter_addresses
        self.quorum_state_path = quorum_state_path
        self.listener = listener
        self.request_timeout = request_timeout
        self.log = get_logger("raft", node_id=core.node_id)
        self._lock = trio.Lock()
        self._wakeup = trio.Event()
        self._replies: dict[tuple[int, int], list[Any]] = {}
        self._inbound_ids = itertools.count(_INBOUND_IDS_START)
        self._clients: dict[int, ControlClient] = {}
        #: Voter changes waiting for the core's answer: operation id -> [event, VoterChangeDone].
        self._operations: dict[int, list[Any]] = {}
        self._operation_ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self._sends_in_flight = 0
        self._sends_done = trio.Event()
        self._started = trio.Event()
        #: The write failure that stopped the driver (see the module doc).
        self.failure: FatalError | None = None

    # -- running ---------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Drive the core until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            async with self._lock:
                await self._apply(self.core.start(trio.current_time()))
            self._started.set()
            task_status.started()
            while True:
                with trio.move_on_at(self.core.next_deadline()):
                    await self._wakeup.wait()
                if self.failure is not None:
                    raise self.failure
                async with self._lock:
                    await self._apply(self.core.tick(trio.current_time()))
                    # Our own apply set the event; anything that touches the core later sets it anew.
                    self._wakeup = trio.Event()

    async def handle_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """The control-plane handler of the ``raft`` API: step the request, await the core's answer."""
        await self._started.wait()
        source, message = decode_envelope(body)
        if not getattr(message, "is_request", False):
            raise RpcError("INVALID_REQUEST", f"{type(message).__name__} is not a request")
        key = (source, next(self._inbound_ids))
        slot: list[Any] = [trio.Event(), None]
        self._replies[key] = slot
        try:
            async with self._lock:
                await self._apply(self.core.step(Received(source, key[1], message), trio.current_time()))
            with trio.move_on_after(self.request_timeout):
                await slot[0].wait()
        finally:
            self._replies.pop(key, None)
        if slot[1] is None:
            raise RequestTimeout(f"no answer to {type(message).__name__} from node {source}")
        return {"message": codec.encode(slot[1])}

    async def propose(self, records: list[bytes]) -> ProposeResult:
        """Add records to the leader's next batch and say which offsets they take; raises
        NotLeaderError elsewhere. Without a linger time the batch is appended at once."""
        async with self._lock:
            result = self.core.propose(records, trio.current_time())
            await self._apply(result.effects)
            return result

    def next_offset(self) -> int:
        """The offset the next proposed record will take on this leader."""
        return self.core.next_offset

    async def create_snapshot(self, end_offset: int, data: bytes) -> None:
        """Store a snapshot of the state below ``end_offset`` and drop the log it covers; it is
        durable when this returns."""
        async with self._lock:
            result = self.core.create_snapshot(end_offset, data)
            await self._apply(result.effects)
        snapshot_id = result.snapshot_id
        self.log.info("snapshot written", end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch)

    async def describe_quorum(self) -> DescribeQuorumResponse:
        async with self._lock:
            return self.core.describe_quorum(trio.current_time())

    # -- voter changes (KIP-853) -----------------------------------------------------------------

    async def _operation(self, start: Any) -> VoterChangeDone:
        operation = next(self._operation_ids)
        slot: list[Any] = [trio.Event(), None]
        self._operations[operation] = slot
        try:
            async with self._lock:
                await self._apply(start(operation, trio.current_time()))
            await slot[0].wait()
        finally:
            self._operations.pop(operation, None)
        return slot[1]

    async def add_voter(self, voter: VoterNode) -> VoterChangeDone:
        """Add `voter` (caught up as an observer) to the voters; answered once committed or refused."""
        return await self._operation(lambda op, now: self.core.add_voter(op, voter, now))

    async def remove_voter(self, key: ReplicaKey) -> VoterChangeDone:
        return await self._operation(lambda op, now: self.core.remove_voter(op, key, now))

    async def upgrade_kraft_version(self, kraft_version: int, validate_only: bool = False) -> VoterChangeDone:
        return await self._operation(
            lambda op, now: self.core.upgrade_kraft_version(op, kraft_version, now, validate_only))

    async def resign(self, grace: float = 1.0) -> None:
        """A leader leaving on purpose: send EndQuorumEpoch so the others elect at once, and give the
        messages up to ``grace`` seconds to leave before the caller cancels the driver."""
        async with self._lock:
            await self._apply(self.core.resign(trio.current_time()))
        with trio.move_on_after(grace):
            while self._sends_in_flight:
                await self._sends_done.wait()

    # -- effects ---------------------------------------------------------------------------------

    async def _apply(self, effects: list[Effect]) -> None:
        """Carry out effects in order; the caller holds the lock. Raises the driver's `failure`
        instead, once a write failed (see the module doc)."""
        if self.failure is not None:
            raise self.failure
        for effect in effects:
            match effect:
                case PersistQuorumState(state=state):
                    try:
                        static = self.core.voter_history.static
                        voters = None if self.core.voter_history.is_dynamic or static is None else sorted(static.ids)
                        await trio.to_thread.run_sync(
                            write_quorum_state_file, self.quorum_state_path, state, voters)
                    except OSError as exc:
                        raise self._fail(storage_failure("cannot write", self.quorum_state_path, exc)) from exc
                case FlushLog(up_to=up_to):
                    try:
                        await trio.to_thread.run_sync(self.core.log.flush, up_to)
                    except FatalError as exc:
                        raise self._fail(exc) from None
                case Send(dest=dest, correlation_id=cid, message=message):
                    self._send(dest, cid, message)
                case Commit():
                    self.listener.handle_commit(effect)
                case LeaderChange(epoch=epoch, leader_id=leader_id):
                    self.log.info("leader changed", epoch=epoch, leader_id=leader_id)
                    self.listener.handle_leader_change(effect)
                case SnapshotLoaded():
                    self.listener.handle_snapshot_loaded(effect)
                case VoterChangeDone(operation=operation):
                    slot = self._operations.get(operation)
                    if slot is not None and slot[1] is None:
                        slot[1] = effect
                        slot[0].set()
        self._wakeup.set()

    def _fail(self, error: FatalError) -> FatalError:
        """Keep ``error`` and wake the run task, which raises it."""
        self.failure = error
        self._wakeup.set()
        return error

    def _send(self, dest: int, cid: int, message: Message) -> None:
        if not message.is_request:
            slot = self._replies.get((dest, cid))
            if slot is not None and slot[1] is None:
                slot[1] = message
                slot[0].set()
            return
        assert self._nursery is not None
        self._sends_in_flight += 1
        self._nursery.start_soon(self._send_request, dest, cid, message)

    def _client(self, dest: int) -> ControlClient | None:
        address = self.core.address_of(dest) or self.voter_addresses.get(dest)
        if address is None:
            return None
        client = self._clients.get(dest)
        if client is not None and (client.host, client.port) == tuple(address):
            return client
        assert self._nursery is not None
        if client is not None:  # the node moved (a new endpoint in the voter set)
            self._nursery.start_soon(client.aclose)
        client = ControlClient(self._nursery, *address, request_timeout=self.request_timeout,
                               connect_timeout=self.request_timeout, tls=self.client_tls,
                               sasl=self.client_sasl)
        self._clients[dest] = client
        return client

    async def _send_request(self, dest: int, cid: int, message: Message) -> None:
        try:
            client = self._client(dest)
            if client is None:
                self.log.warning("no address for node", dest=dest)
                return
            try:
                body = await client.request(RAFT_API, encode_envelope(self.core.node_id, message))
                response = decode_response(body, message)
            except ConnectionLost as exc:
                self.log.debug("raft peer unreachable", dest=dest, request=type(message).__name__,
                               error=str(exc))
                async with self._lock:
                    await self._apply(self.core.unreachable(dest, cid, trio.current_time()))
                return
            except RpcError as exc:
                self.log.debug("raft request failed", dest=dest, request=type(message).__name__,
                               error=exc.code)
                return
            async with self._lock:
                await self._apply(self.core.step(Received(dest, cid, response), trio.current_time()))
        finally:
            self._sends_in_flight -= 1
            if not self._sends_in_flight:
                self._sends_done.set()
                self._sends_done = trio.Event()
