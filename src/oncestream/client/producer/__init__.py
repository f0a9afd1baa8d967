"""The producer: ``Producer`` (``producer``), batches encoded in the caller's thread
(``accumulator``, ``record_batch_builder``, ``partitioner``), sent by the I/O loop (``sender``),
delivery reports (``delivery``) and transactions (``transactions``, ``txn_state``, KIP-939's
``prepared_txn``). Imports ``client.common`` only, never the consumer or admin.
"""
