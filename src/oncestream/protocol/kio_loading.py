"""Load kio without the hypothesis strategies it would register at import (process start-up time).

Why: kio 0.6.5's ``kio/static/_phantom.py`` runs ``import hypothesis.strategies`` when it is
imported, and when that succeeds every phantom type kio defines (``i8`` .. ``i64``, ``u8`` ..,
``f64``, the timedelta and datetime types, ``TopicName``, ``GroupId`` ...) registers a hypothesis
strategy as its class is created (``Phantom.__init_subclass__`` calls ``__hypothesis_hook__``).
Every kio schema module imports those types, so in an environment where hypothesis is installed
(ours: it is in the ``test`` extra) every process that imports the client or the protocol codec
imported hypothesis and built those strategies: 150 ms of a 340 ms ``import oncestream.client``
with a warm page cache, and about a second with a cold one (hypothesis's ``timezones()`` reads
every zoneinfo file). Only property tests use those strategies.

How: ``load_kio()`` imports ``kio.static._phantom`` once, before any other kio module, with
``sys.modules["hypothesis"]`` set to ``None`` for the duration of that one import and removed
right after. ``None`` in ``sys.modules`` is the import system's documented marker for "this module
is not available": kio's ``try: import hypothesis.strategies / except ImportError`` then takes the
branch it takes in an install without hypothesis, a configuration kio supports (hypothesis is not
one of its dependencies). Nothing of kio is patched or replaced; the codec is the same code either
way (the hooks only register strategies). It is done only when neither kio's phantom module nor
hypothesis is loaded yet: in a process that already imported hypothesis, kio registers its
strategies itself as before.

The strategies are not lost: ``register_kio_strategies()`` runs every phantom type's own
``__hypothesis_hook__``, the registrations kio would have made. It is the ``hypothesis`` entry
point of this package (pyproject.toml), which hypothesis calls when it is imported (its
documented way for a library to register strategies without importing hypothesis itself), and
property tests that draw kio types (``st.from_type(<kio request class>)``) also call it directly,
so they work from a checkout whose installed metadata predates the entry point.

Limit: a thread importing hypothesis for the first time during that one import of kio's phantom
module (a few milliseconds, at the process's first protocol import) would get ImportError.

Called by the package root ``oncestream/__init__.py`` (and, explicitly again, by
``oncestream.protocol`` and ``oncestream.client``), which runs before any oncestream module
imports kio: the broker, the client, the SQL server and the Spark connector all start without
hypothesis.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator

_PHANTOM_MODULE = "kio.static._phantom"
# The kio modules that define phantom types (kio 0.6.5); every other kio module only uses them.
_PHANTOM_TYPE_MODULES = ("kio.static.primitive", "kio.schema.types")


def load_kio() -> None:
    """Import kio's phantom-type base without hypothesis (see the module docstring); a no-op
    once kio's phantom module or hypothesis is loaded."""
    if _PHANTOM_MODULE in sys.modules or "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # "not available" for this import
    try:
        importlib.import_module(_PHANTOM_MODULE)
    finally:
        if "hypothesis" in sys.modules and sys.modules["hypothesis"] is None:
            del sys.modules["hypothesis"]


def _phantom_types(base: type) -> Iterator[type]:
    """``base``'s subclasses, parents before children (the order kio creates them in)."""
    subclasses: list[type] = base.__subclasses__()
    for sub in subclasses:
        yield sub
        yield from _phantom_types(sub)


def register_kio_strategies() -> None:
    """Register the hypothesis strategies of kio's phantom types (what kio does at import when it
    sees hypothesis). The ``hypothesis`` entry point: hypothesis calls it when it is imported.
    Without kio loaded yet it does nothing: kio then sees hypothesis and registers them itself."""
    if _PHANTOM_MODULE not in sys.modules:
        return
    for name in _PHANTOM_TYPE_MODULES:
        importlib.import_module(name)
    phantom = sys.modules[_PHANTOM_MODULE].Phantom
    seen: set[type] = set()
    for cls in _phantom_types(phantom):
        if cls not in seen:  # a class with two phantom parents is listed under both
            seen.add(cls)
            cls.__hypothesis_hook__()  # type: ignore[attr-defined]
