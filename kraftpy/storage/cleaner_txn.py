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

Rules (Kafka's, kept on the cleaned log rather than on the log read):

* the map never takes a record of an aborted transaction: it cannot shadow an older committed
  value of its key;
* the copy drops an aborted transaction's batches (an empty batch stays where it is the last of a
  producer still in the producer state, as for any batch), and compacts a committed one's records
  like any others;
* a marker may go only once no batch of its transaction is left in the cleaned log
  (:meth:`on_marker` answers that); the cleaner then keeps it until its delete horizon
  (``delete.retention.ms``, set on it by the first pass that finds it removable, as for
  tombstones, KIP-534) has passed, so that a consumer which read the transaction's records in time
  also reads how it ended;
* the ``.txnindex`` of a cleaned segment keeps the entries of the aborted transactions with a
  batch left (:attr:`retained_index`, in marker order).

The index and the markers agree in a log kraftpy wrote. Where they would not, the cleaner keeps
what it cannot account for: an ABORT marker with no entry (its batches were kept as committed) goes
only once none of them is left, and a COMMIT marker met inside a transaction the index says aborted
stays.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import attrs

from kraftpy.protocol.batch_header import BatchHeader
from kraftpy.protocol.records import ControlRecordType
from kraftpy.storage.txn_index import AbortedTxn


@attrs.define
class _Aborted:
    txn: AbortedTxn
    #: A batch of the transaction stays in the cleaned log.
    retained: bool = False


class CleanedTransactions:
    """The transactions of one walk over a log, in offset order (see the module doc)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        #: Aborted transactions not yet reached by the walk, by first offset.
        self._pending = deque(sorted(aborted, key=lambda txn: (txn.first_offset, txn.last_offset)))
        #: producer id → its aborted transaction the walk is inside.
        self._aborted: dict[int, _Aborted] = {}
        #: producer id → whether a batch of its (committed) transaction the walk is inside stays.
        self._committed: dict[int, bool] = {}
        #: The aborted transactions whose marker and some batch stay, in marker order.
        self.retained_index: list[AbortedTxn] = []

    def _reach(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            txn = pending.popleft()
            self._aborted.setdefault(txn.producer_id, _Aborted(txn))

    def on_data_batch(self, header: BatchHeader) -> bool:
        """A transactional data batch; whether its transaction was aborted."""
        self._reach(header.last_offset)
        producer_id = header.producer_id
        if producer_id in self._aborted:
            return True
        self._committed.setdefault(producer_id, False)
        return False

    def on_data_kept(self, header: BatchHeader) -> None:
        """The transactional data batch last given to :meth:`on_data_batch` stays (perhaps empty)."""
        producer_id = header.producer_id
        aborted = self._aborted.get(producer_id)
        if aborted is not None:
            aborted.retained = True
        else:
            self._committed[producer_id] = True

    def on_marker(self, header: BatchHeader, control_type: int | None) -> bool:
        """A transaction marker (``control_type`` from its record's key; None: unreadable); whether it
        may go once past its delete horizon — its transaction has no batch left."""
        self._reach(header.last_offset)
        producer_id = header.producer_id
        if control_type == ControlRecordType.ABORT:
            aborted = self._aborted.pop(producer_id, None)
            committed = self._committed.pop(producer_id, None)
            if aborted is None:
                return not committed  # no entry for it: removable only when nothing of it is left
            if aborted.retained:
                self.retained_index.append(aborted.txn)
                return False
            return True
        if control_type == ControlRecordType.COMMIT:
            if self._aborted.pop(producer_id, None) is not None:
                return False  # the index says aborted, the marker committed: keep it
            return not self._committed.pop(producer_id, False)
        return False
