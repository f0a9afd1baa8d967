"""The consumer: ``Consumer`` (``consumer``), the fetch pipeline (``fetcher``, ``fetch_decoder``),
group membership (``group``, ``assignors``), offset commits (``offset_commits``) and the columnar
``ColumnConsumer`` (``batch_reader``). Imports ``client.common`` only, never the producer or admin.
"""
