"""Tiered storage (KIP-405): closed log segments copied to an object store and read back from it.

Sits between ``log`` and ``broker``: it imports ``log``, ``protocol``, ``errors`` and
``durable_files``; ``log`` never imports it. ``object_store`` is the one narrow interface to the
storage (S3 through obstore, or a local directory); the remote log metadata, the copier and the
reader are built on it.
"""
