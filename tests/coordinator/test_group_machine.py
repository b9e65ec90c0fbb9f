"""Random member actions against one group, with the coordinator's invariants checked after every step.

Hypothesis draws a sequence of actions of four clients (two dynamic, two static): the next step of
a well-behaved client (join, sync or heartbeat, as its state asks), or a disruption: a join, sync or
heartbeat out of turn, a leave, a commit, a restart (a static member comes back under a new member
id), new protocol metadata, a client falling back to its previous generation, time passing, and a
coordinator failover. Every request runs as its own task,
as clients' requests do; after each step the test lets everything settle and checks:

* the group's own invariants (leader among members, static-member map, counters);
* one leader and one protocol per generation, and generations that never go back (within one
  coordinator's life: a failover reloads the last stored generation);
* an assignment is only ever delivered for the generation it was made for;
* a failover loses no acknowledged commit, and a fetched offset is always one that was acknowledged;
* no timer callback failed;
* at the end, with every client silent for ten minutes, every parked request has been answered.

A failure prints the shrunk action list; pasting it into ``run(...)`` replays it.
"""

from __future__ import annotations

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.errors import ErrorCode
from tests.helpers.offsets_log import GroupHarness

GROUP = "g"
CLIENTS = 4
STATIC = {2: "pod-2", 3: "pod-3"}
TP = ("t", 0)

#: "step" is what a live client does next (join, sync, or heartbeat, as its state asks); the others
#: are the disruptions.
actions = st.one_of(
    st.tuples(st.just("step"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("step"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("step"), st.integers(0, CLIENTS - 1)),
    st.tuples(st.sampled_from(["join", "sync", "heartbeat", "leave", "commit", "restart", "protocols", "stale"]),
              st.integers(0, CLIENTS - 1)),
    st.tuples(st.just("sleep"), st.sampled_from([0.1, 0.1, 0.5, 3, 8, 31])),
    st.tuples(st.just("failover"), st.just(0)),
)


@attrs.define
class Client:
    index: int
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    members: list[str] = attrs.Factory(list)
    #: The generation this client had before its last join (a "stale" client goes back to it).
    previous_generation: int = -1
    protocol: str = "range"
    metadata: bytes = b"v0"
    busy: bool = False
    #: Joined a generation and not yet synced it (or told to rejoin): what "step" does next.
    needs_sync: bool = False
    needs_join: bool = True

    @property
    def instance_id(self) -> str | None:
        return STATIC.get(self.index)


class Scenario:
    def __init__(self, h: GroupHarness, nursery: trio.Nursery) -> None:
        self.h = h
        self.nursery = nursery
        self.clients = [Client(i) for i in range(CLIENTS)]
        self.leaders: dict[int, tuple[str, str]] = {}  # generation -> (leader, protocol), this incarnation
        self.last_generation = 0
        self.acked: set[int] = set()
        self.next_offset = 0

    # -- actions ---------------------------------------------------------------------------------

    def spawn(self, client: Client, fn) -> None:
        if client.busy:
            return
        client.busy = True

        async def run() -> None:
            try:
                await fn(client)
            finally:
                client.busy = False

        self.nursery.start_soon(run)

    async def join(self, c: Client) -> None:
        protocols = [(c.protocol, c.metadata), ("roundrobin", c.metadata)]
        response = await self.h.join(GROUP, c.member_id, instance_id=c.instance_id, protocols=protocols,
                                     session_timeout_ms=10_000, rebalance_timeout_ms=20_000)
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            c.member_id = response.member_id
            response = await self.h.join(GROUP, c.member_id, protocols=protocols, session_timeout_ms=10_000,
                                         rebalance_timeout_ms=20_000)
        if response.error_code == ErrorCode.NONE:
            leader_protocol = (response.leader, response.protocol_name)
            known = self.leaders.setdefault(response.generation_id, leader_protocol)
            if not (response.skip_assignment or known == leader_protocol):
                raise AssertionError(f"generation {response.generation_id}: {known} and {leader_protocol}")
            c.previous_generation = c.generation
            c.member_id, c.generation, c.leader = response.member_id, response.generation_id, response.leader
            c.members = [m.member_id for m in response.members]
            c.needs_sync, c.needs_join = True, False
        elif response.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            c.member_id, c.generation = "", -1

    async def step(self, c: Client) -> None:
        if c.needs_join or not c.member_id:
            await self.join(c)
        elif c.needs_sync:
            await self.sync(c)
        else:
            await self.heartbeat(c)

    async def sync(self, c: Client) -> None:
        if not c.member_id:
            return
        generation = c.generation
        assignments = ({m: f"{generation}:{m}".encode() for m in c.members}
                       if c.leader == c.member_id else None)
        response = await self.h.sync(GROUP, generation, c.member_id, assignments, instance_id=c.instance_id,
                                     protocol_type=None, protocol_name=None, version=4)
        if response.error_code == ErrorCode.NONE:
            c.needs_sync = False
            if response.assignment:
                made_for = int(response.assignment.split(b":")[0])
                assert made_for == generation, f"an assignment of generation {made_for} delivered for {generation}"
        else:
            c.needs_join = True

    async def heartbeat(self, c: Client) -> None:
        if c.member_id:
            response = await self.h.heartbeat(GROUP, c.generation, c.member_id, instance_id=c.instance_id)
            if response.error_code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                c.member_id, c.generation = "", -1
            if response.error_code != ErrorCode.NONE:
                c.needs_join = True

    async def leave(self, c: Client) -> None:
        if c.member_id:
            await self.h.leave(GROUP, (c.member_id, c.instance_id))
            c.member_id, c.generation = "", -1

    async def commit(self, c: Client) -> None:
        self.next_offset += 1
        offset = self.next_offset
        answer = await self.h.commit(GROUP, {TP: offset}, generation=c.generation, member_id=c.member_id,
                                     instance_id=c.instance_id if c.member_id else None)
        if answer[TP] == ErrorCode.NONE:
            self.acked.add(offset)

    async def restart(self, c: Client) -> None:
        c.member_id, c.generation = "", -1
        await self.join(c)

    async def stale(self, c: Client) -> None:
        """The client acts on the generation before its last (as if its last JoinGroup answer were lost)."""
        c.generation = c.previous_generation
        c.needs_sync = True

    async def protocols(self, c: Client) -> None:
        c.metadata = b"v" + str(int(c.metadata[1:]) + 1).encode()
        c.protocol = "roundrobin" if c.protocol == "range" else "range"
        c.needs_join = True

    async def failover(self) -> None:
        await trio.testing.wait_all_tasks_blocked()
        before = await self.h.fetch(GROUP, [TP])
        log = self.h.logs[0]
        old_epoch = log.leader_epoch
        log.new_epoch()
        self.h.coordinator.on_resigned(0, old_epoch)
        self.h.coordinator = self.h.new_coordinator()
        await self.h.start(self.nursery)
        after = await self.h.fetch(GROUP, [TP])
        assert after == before, f"failover changed committed offsets: {before} -> {after}"
        self.leaders.clear()
        group = self.h.group(GROUP)
        self.last_generation = group.generation_id if group is not None else 0

    # -- checks ----------------------------------------------------------------------------------

    async def check(self) -> None:
        await trio.testing.wait_all_tasks_blocked()
        assert self.h.timer_failures() == 0
        group = self.h.group(GROUP)
        if group is not None:
            group.check_invariants()
            assert group.generation_id >= self.last_generation, "generation went back"
            self.last_generation = group.generation_id
            known = self.leaders.get(group.generation_id)
            if known is not None and group.leader_id is not None and group.state.value in (
                    "CompletingRebalance", "Stable"):
                assert group.protocol_name == known[1]
        fetched, _ = await self.h.fetch(GROUP, [TP])
        offset = fetched[TP][0]
        assert offset == -1 and not self.acked or offset in self.acked, (offset, self.acked)


async def run(steps: list[tuple[str, object]]) -> None:
    async with trio.open_nursery() as nursery:
        h = GroupHarness(group_initial_rebalance_delay_ms=0)
        await h.start(nursery)
        s = Scenario(h, nursery)
        for name, arg in steps:
            if name == "sleep":
                await trio.sleep(arg)
            elif name == "failover":
                await s.failover()
            else:
                s.spawn(s.clients[arg], getattr(s, name))
            await s.check()
        # Everyone falls silent: within a few timeouts, every parked request must have its answer.
        await trio.sleep(600)
        await s.check()
        stuck = [c.index for c in s.clients if c.busy]
        assert not stuck, f"clients {stuck} still wait for an answer after ten silent minutes"
        nursery.cancel_scope.cancel()


@settings(max_examples=400, deadline=None)
@given(st.lists(actions, min_size=1, max_size=60))
def test_random_member_actions_keep_the_invariants(steps):
    trio.run(run, steps, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_known_interleaving():
    steps = [("join", 0), ("join", 2), ("sleep", 3), ("sync", 0), ("sync", 2), ("commit", 0), ("restart", 2),
             ("sync", 2), ("protocols", 0), ("join", 0), ("failover", 0), ("heartbeat", 2), ("join", 1),
             ("sleep", 31), ("leave", 0), ("commit", 3)]
    trio.run(run, steps, clock=trio.testing.MockClock(autojump_threshold=0))
