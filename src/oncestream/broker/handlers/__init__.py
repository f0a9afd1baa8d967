"""One module per API family; each exposes ``handle*(state, header, request)`` functions."""
