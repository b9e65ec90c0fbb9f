"""What the log cleaner knows of transactions while it walks a log (Kafka's ``CleanedTransactionMetadata``).

Theory of operation
-------------------
A pass cleans only below the log's last stable offset (:func:`kraftpy.storage.cleaner.log_to_clean`),
so every transactional batch it reads belongs to a transaction that has ended; whether it ended
committed or aborted is in the aborted-transaction index (``.txnindex``) of the segment holding its
marker, which may lie past the part being cleaned. :class:`CleanedTransactions` is made from those
entries (:meth:`kraftpy.storage.log.Log.collect_aborted_transactions`) and then told, in offset
order, of every transactional batch and marker the walk meets (non-transactional batches need not
be told: they belong to no transaction)::

    entries, by first offset ──(a batch reaches an entry's first offset)──▶ aborted[producer]
    transactional data batch of producer P:  P in aborted → aborted (its records are not mapped,
                                             and the copy drops them); else → committed[P]
    ABORT marker of P:  ends aborted[P]        COMMIT marker of P:  ends committed[P]

Rules (Kafka's):

* the map never takes a record of an aborted transaction: it cannot shadow an older committed
  value of its key;
* the copy drops an aborted transaction's batches (an empty batch stays where it is the last of a
  producer still in the producer state, as for any batch), and compacts a committed one's records
  like any others;
* a marker may go only once a pass reads no batch of its transaction (:meth:`on_marker` answers
  that); the cleaner then keeps it until its delete horizon (``delete.retention.ms``, set on it by
  the first pass that finds it removable, as for tombstones, KIP-534) has passed, so that a
  consumer which read the transaction's records in time also reads how it ended;
* the ``.txnindex`` of a cleaned segment keeps the entries of the aborted transactions of which
  the pass read a batch (:attr:`retained_index`, in marker order). So an entry outlives its
  transaction's last batch by one pass: a read_committed fetch racing the swap that removes the
  batches (its records read from the old segment, its aborted transactions from the new index)
  still names the transaction.

Where a pass removes a transaction's last batch, :meth:`on_marker` says so (``revisit``): the
cleaner makes the log due again at once, so that the marker's horizon does not wait for new dirty
data to bring the next pass (Kafka waits for it).

The index and the markers agree in a log kraftpy wrote. Where they would not, the cleaner keeps
what it cannot account for: an ABORT marker with no entry (its batches were kept as committed) goes
only once a pass reads none of them, and a COMMIT marker met inside a transaction the index says
aborted stays.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import attrs

from kraftpy.protocol.batch_header import BatchHeader
from kraftpy.protocol.records import ControlRecordType
from kraftpy.storage.txn_index import AbortedTxn


@attrs.define
class _Seen:
    """What the walk met of one transaction."""

    #: A batch of it was read, and one stays in the cleaned log.
    read: bool = False
    retained: bool = False


@attrs.define
class _Aborted(_Seen):
    txn: AbortedTxn | None = None


@attrs.frozen
class MarkerFate:
    """What :meth:`CleanedTransactions.on_marker` decided for a marker."""

    #: No batch of its transaction was read: it may go once past its delete horizon.
    removable: bool
    #: Its transaction's last batches were removed by this pass: the next pass will find it removable.
    revisit: bool = False


class CleanedTransactions:
    """The transactions of one walk over a log, in offset order (see the module doc)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        #: Aborted transactions not yet reached by the walk, by first offset.
        self._pending = deque(sorted(aborted, key=lambda txn: (txn.first_offset, txn.last_offset)))
        #: producer id → its aborted transaction the walk is inside.
        self._aborted: dict[int, _Aborted] = {}
        #: producer id → its (committed) transaction the walk is inside.
        self._committed: dict[int, _Seen] = {}
        #: The aborted transactions whose marker stays and of which a batch was read, in marker order.
        self.retained_index: list[AbortedTxn] = []

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            txn = pending.popleft()
            self._aborted.setdefault(txn.producer_id, _Aborted(txn=txn))

    def on_data_batch(self, header: BatchHeader) -> bool:
        """A transactional data batch; whether its transaction was aborted."""
        self._reach(header.last_offset)
        producer_id = header.producer_id
        aborted = self._aborted.get(producer_id)
        if aborted is not None:
            aborted.read = True
            return True
        self._committed.setdefault(producer_id, _Seen()).read = True
        return False

    def on_data_kept(self, header: BatchHeader) -> None:
        """The transactional data batch last given to :meth:`on_data_batch` stays (perhaps empty)."""
        producer_id = header.producer_id
        seen = self._aborted.get(producer_id) or self._committed[producer_id]
        seen.retained = True

    def on_marker(self, header: BatchHeader, control_type: int | None) -> MarkerFate:
        """A transaction marker (``control_type`` from its record's key; None: unreadable)."""
        self._reach(header.last_offset)
        producer_id = header.producer_id
        kept = MarkerFate(False)
        if control_type == ControlRecordType.ABORT:
            aborted = self._aborted.pop(producer_id, None)
            seen = self._committed.pop(producer_id, None)
            if aborted is not None:
                seen = aborted
                if aborted.read and aborted.txn is not None:
                    self.retained_index.append(aborted.txn)
        elif control_type == ControlRecordType.COMMIT:
            if self._aborted.pop(producer_id, None) is not None:
                return kept  # the index says aborted, the marker committed: keep it
            seen = self._committed.pop(producer_id, None)
        else:
            return kept
        if seen is None or not seen.read:
            return MarkerFate(True)
        return MarkerFate(False, revisit=not seen.retained)
