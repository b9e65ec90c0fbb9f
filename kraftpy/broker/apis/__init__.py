"""The Kafka API handlers of the data plane, one module per area, behind one dispatcher.

=================  ===============================================================
module             APIs
=================  ===============================================================
``dispatch``       the dispatcher (`KafkaApis`): parse, route, encode; ApiVersions
``produce``        Produce, InitProducerId
``fetch``          Fetch (consumers and follower brokers)
``offsets``        ListOffsets, OffsetForLeaderEpoch, DeleteRecords
``metadata``       Metadata (and topic auto-creation), DescribeCluster
``topics``         CreateTopics, DeleteTopics, CreatePartitions
``configs``        DescribeConfigs, IncrementalAlterConfigs
``reassignments``  ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments
``brokers``        UnregisterBroker
``txn_markers``    WriteTxnMarkers (from the transaction coordinator)
``forwarding``     what every request forwarded to the controller shares
``common``         topic ids on the wire, finding the partition a request acts on
=================  ===============================================================

Each area is a class that takes the collaborators it uses (the replica manager, the metadata
cache, the controller channel, the settings) and lists its handlers (``handlers()``); the broker
builds them and registers them with the dispatcher. No handler reaches through the broker.
"""

from kraftpy.broker.apis.dispatch import Handler, KafkaApis

__all__ = ["Handler", "KafkaApis"]
