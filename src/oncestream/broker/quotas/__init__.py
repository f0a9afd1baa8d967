"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546, KIP-599): the entities and their
values (``entities``), the measurements (``rate``, ``managers``), the durable store (``store``)
and their application to requests (``enforcement``). See docs/quotas.md."""
