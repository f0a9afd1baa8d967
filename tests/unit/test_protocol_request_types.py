"""protocol/request_types.py declares one typed request per API at the handler boundary: the union
of kio's request classes of exactly the versions in the API table (protocol/api_keys.py).

The module is generated from that table; this test regenerates it and fails when the two drift
(a version added to API_VERSIONS without its class in the handler's request type, or the reverse).
Regenerate with ``python -m tests.unit.test_protocol_request_types``.
"""

from __future__ import annotations

import pathlib

from kio.schema.index import api_key_map

import oncestream.protocol.request_types as request_types
from oncestream.broker.dispatch import HANDLERS
from oncestream.protocol.api_keys import API_VERSIONS
from oncestream.protocol.schemas import request_class

_MODULE = pathlib.Path(request_types.__file__)

_HEAD = '''"""One typed request per API at the handler boundary (generated: do not edit by hand).

Each alias is the union of kio's generated request dataclasses of exactly the versions
``protocol/api_keys.API_VERSIONS`` advertises, so a handler annotated ``request: ProduceRequest``
gets attribute access mypy checks against every version it answers: a field some version lacks
is a type error unless the handler asks for it version-aware (``getattr``/``has_field``). The
dispatcher hands handlers kio's decoded object itself (no copy: Produce's records stay the views
kio decoded).

The imports are for the type checker only: importing every version's module at start-up would
cost the broker and the client a few hundred module imports they never use. Regenerate with
``python -m tests.unit.test_protocol_request_types`` after changing the API table; the unit test
of that name fails while this file and the table disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import TypeAlias

'''


def _alias_name(api_key: int) -> str:
    return request_class(api_key, API_VERSIONS[api_key][1]).__name__


def render() -> str:
    """The source text of protocol/request_types.py for the current API table."""
    imports: list[tuple[str, int, str]] = []
    aliases: list[str] = []
    for api_key in sorted(API_VERSIONS):
        low, high = API_VERSIONS[api_key]
        module = api_key_map[api_key]
        members = []
        for version in range(low, high + 1):
            cls = request_class(api_key, version)
            local = f"_{module}_v{version}"
            imports.append((module, version, f"    from kio.schema.{module}.v{version} import request as {local}"))
            members.append(f"{local}.{cls.__name__}")
        body = "\n        | ".join(members)
        aliases.append(f"    {_alias_name(api_key)}: TypeAlias = (\n        {body}\n    )  # api key {api_key}")
    # In the order ruff's isort keeps them: by module, then by version as a number.
    return _HEAD + "\n".join(line for _, _, line in sorted(imports)) + "\n\n" + "\n".join(aliases) + "\n"


def test_request_types_match_the_api_table() -> None:
    assert _MODULE.read_text() == render(), (
        "protocol/request_types.py is out of date with API_VERSIONS: "
        "run python -m tests.unit.test_protocol_request_types"
    )


def test_every_handler_takes_its_typed_request() -> None:
    """The dispatcher's handler for each API is annotated with that API's request alias."""
    for api_key, handler in HANDLERS.items():
        annotation = handler.__annotations__.get("request", "")
        # A bare alias, or one reached through the module (``wire.OffsetCommitRequest``).
        assert annotation.rpartition(".")[2] == _alias_name(api_key), (api_key, handler.__qualname__, annotation)


if __name__ == "__main__":
    _MODULE.write_text(render())
