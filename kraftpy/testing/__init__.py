"""kraftpy inside a test suite: a real cluster for each test session, no JVM, no Docker.

    from kraftpy.testing import cluster

    with cluster(brokers=3) as c:
        c.create_topic("orders", partitions=3)
        producer = Producer({"bootstrap.servers": c.bootstrap_servers})
        c.leader("orders", 0).kill()

The pytest plugin (`kraftpy.testing.plugin`, active once kraftpy is installed) hands the same
`Cluster` out as the ``kraftpy_cluster`` fixture. Importing this package costs next to nothing: the
cluster runs in processes of its own (`kraftpy.testing._supervisor`). docs/testing.md tells the rest.

`kraftpy.testing.faults` and `kraftpy.testing.proxy` are the process faults and the TCP proxy the
clusters' faults (and the fault harness's nemeses) are made of.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kraftpy.testing._cluster import Cluster, ClusterError, Node, PartitionInfo, TopicInfo, cluster

__all__ = ["Cluster", "ClusterError", "Node", "PartitionInfo", "TopicInfo", "cluster"]


def __getattr__(name: str) -> Any:
    # Imported when first asked for: the cluster's own processes start from modules of this package
    # (kraftpy.testing._start) and need none of the test's side.
    if name in __all__:
        from kraftpy.testing import _cluster

        return getattr(_cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
