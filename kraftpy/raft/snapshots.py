"""Snapshots (KIP-630): created by the state machine, served by the leader, downloaded by the rest.

Theory of operation:

- The state machine hands the core a snapshot of everything below a committed batch boundary it
  has applied (`create_snapshot`); the core names it (end offset, epoch of the last batch), stores
  it in the log and may drop the log below it. Like every change to the log this only touches
  memory: the returned FlushLog makes it durable, the snapshot before the log it replaces.
- A leader asked to fetch from below its log start answers with its latest snapshot's id; the
  fetcher then asks for the snapshot in chunks (FetchSnapshot: id, position), each answered with up
  to `snapshot_chunk_bytes` of the file.
- The fetcher gathers the chunks (a download does not survive a crash), and after the last one
  resets its log to start at the snapshot's end, flushes, and tells the state machine to reload
  (`SnapshotLoaded`); fetching resumes from the snapshot's end. A snapshot holds only committed
  state, so its end is committed.
- At kraft.version 1 a snapshot starts with a control batch holding the kraft.version and the voter
  set in force at its end (kraftpy.raft.snapshot_control), put there by the core in front of the
  state machine's bytes: a replica that loads it (a download, or a restart on a log that starts at
  it) learns the voters the dropped log held. The state machine skips that batch when it reads one.
"""

from __future__ import annotations

import attrs

from kraftpy.raft.core_base import CoreBase
from kraftpy.raft.effects import Effect, Send, SnapshotLoaded
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.follower import FetchProgress
from kraftpy.raft.log import SnapshotId
from kraftpy.raft.messages import FetchSnapshotRequest, FetchSnapshotResponse
from kraftpy.raft.quorum_state import Follower, Leader
from kraftpy.raft.snapshot_control import control_batch
from kraftpy.raft.voters import KRAFT_VERSION_STATIC


@attrs.frozen
class SnapshotResult:
    """The snapshot `create_snapshot` stored, and the effects that make it durable."""

    snapshot_id: SnapshotId
    effects: list[Effect]


class SnapshotRole(CoreBase):
    def create_snapshot(self, end_offset: int, data: bytes, *, delete_log_before: bool = True) -> SnapshotResult:
        """Store the state machine's snapshot of everything below `end_offset` and, with
        `delete_log_before`, drop the log it covers (replicas behind it will fetch the snapshot).

        `end_offset` must be committed and already delivered by a Commit, and be a batch boundary.
        Raises ValueError otherwise. The driver applies the effects (a FlushLog)."""
        log = self._log
        latest = log.latest_snapshot_id
        if end_offset > self._applied or end_offset <= log.start_offset:
            raise ValueError(f"snapshot end {end_offset} not in ({log.start_offset}, {self._applied}]")
        if latest is not None and end_offset <= latest.end_offset:
            raise ValueError(f"snapshot end {end_offset} not past the latest snapshot {latest}")
        last = log.read(end_offset - 1, 1)[0]
        if last.next_offset != end_offset:
            raise ValueError(f"snapshot end {end_offset} is not a batch boundary")
        snapshot_id = SnapshotId(end_offset=end_offset, epoch=last.epoch)
        kraft_version = self._history.kraft_version_at(end_offset - 1)
        if kraft_version > KRAFT_VERSION_STATIC:
            data = control_batch(kraft_version, self._history.voters_at(end_offset - 1), snapshot_id,
                                 self._wall_clock()) + data
        log.create_snapshot(snapshot_id, data)
        if delete_log_before:
            log.delete_before_snapshot(snapshot_id)
            self._history.truncate_old(log.start_offset)
        out: list[Effect] = []
        self._flush(out)
        return SnapshotResult(snapshot_id, self._finish(out))

    # -- serving (leader) ------------------------------------------------------------------------

    def _handle_fetch_snapshot_request(
        self, src: int, cid: int, req: FetchSnapshotRequest, now: float, out: list[Effect]
    ) -> None:
        def reply(error: int, **kwargs: object) -> None:
            response = FetchSnapshotResponse(error, self._leader_or_none(), self.epoch,  # type: ignore[arg-type]
                                             leader_endpoints=self._leader_endpoints(), **kwargs)
            out.append(Send(src, cid, response))

        leader = self._leader
        if leader is None or not isinstance(self._quorum.state, Leader):
            reply(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            return
        leader.tracker.record_contact(src, now)
        size = self._log.snapshot_size(req.snapshot_id)
        if size is None:
            reply(ErrorCode.SNAPSHOT_NOT_FOUND, snapshot_id=req.snapshot_id)
            return
        if not 0 <= req.position <= size:
            reply(ErrorCode.POSITION_OUT_OF_RANGE, snapshot_id=req.snapshot_id, size=size)
            return
        max_bytes = min(req.max_bytes, self.config.snapshot_chunk_bytes)
        chunk = self._log.read_snapshot(req.snapshot_id, req.position, max_bytes)
        reply(ErrorCode.NONE, snapshot_id=req.snapshot_id, size=size, position=req.position, unaligned_records=chunk)

    # -- downloading (follower, observer) --------------------------------------------------------

    def _handle_fetch_snapshot_response(
        self, src: int, fetch: FetchProgress, resp: FetchSnapshotResponse, now: float, out: list[Effect]
    ) -> None:
        snapshot_id = fetch.snapshot_id
        state = self._quorum.state
        chunk = len(resp.unaligned_records)
        if (
            resp.error_code != ErrorCode.NONE
            or snapshot_id is None
            or resp.snapshot_id != snapshot_id
            or resp.position != fetch.snapshot_position
            or not (isinstance(state, Follower) and state.leader_id == resp.leader_id)
            # A chunk as large as asked for at most, inside the size the first chunk announced.
            or chunk > self.config.snapshot_chunk_bytes
            or resp.position + chunk > resp.size
            or (fetch.snapshot_size >= 0 and resp.size != fetch.snapshot_size)
            or (not chunk and resp.position < resp.size)
        ):
            # Start over with a Fetch: the leader names its current snapshot.
            fetch.snapshot_id = None
            self._fetch_failed(fetch, now)
            return
        fetch.snapshot_size = resp.size
        fetch.has_fetched = True
        fetch.fetch_deadline = now + self._fetch_timeout
        self._log.write_snapshot_chunk(snapshot_id, resp.position, resp.unaligned_records)
        fetch.snapshot_position += len(resp.unaligned_records)
        if fetch.snapshot_position >= resp.size:
            self._log.finish_snapshot_download(snapshot_id)
            fetch.snapshot_id = None
            # The voters of the log the snapshot replaced are the ones it carries (KIP-853).
            before = (self._history.voters, self._history.kraft_version)
            self._history.load(self._log)
            if (self._history.voters, self._history.kraft_version) != before:
                self._voters_changed(now, out)
            # The snapshot and the emptied log are durable before the next fetch vouches for them.
            self._flush(out)
            # The snapshot holds only committed state (KIP-630), so its end is committed.
            self._high_watermark = max(self._high_watermark, snapshot_id.end_offset)
            if snapshot_id.end_offset >= self._applied:
                self._applied = snapshot_id.end_offset
                out.append(SnapshotLoaded(snapshot_id))
        self._send_fetch(now, out)
