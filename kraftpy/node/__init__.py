"""Process composition: a node assembles a controller, a broker or both from one configuration
(`KraftNode`), with one Raft node factory for either role (`RaftNode`). Nothing below imports it."""

from kraftpy.node.kraft_node import KraftNode
from kraftpy.node.raft_node import RaftNode, raft_config, voter_addresses

__all__ = ["KraftNode", "RaftNode", "raft_config", "voter_addresses"]
