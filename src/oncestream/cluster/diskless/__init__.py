"""Diskless topics (KIP-1150/KIP-1163): produce objects in the object store, batch coordinates in
PostgreSQL. The write side (append pipeline, commit transaction, garbage collection) and the read
side (coordinates, the shared object range cache, reads, wake-ups, offsets, log start moves) live
in separate modules."""
