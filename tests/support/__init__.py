"""Shared test support: broker processes, free ports, record generators, raw wire helpers."""
