"""KIP-714 ClientMetrics subscriptions from the Admin client: IncrementalAlterConfigs /
DescribeConfigs on CLIENT_METRICS resources (type 16) and ListConfigResources (KIP-1142), which
confluent-kafka's AdminClient cannot name (its ResourceType has no CLIENT_METRICS)."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from oncestream.client.common.cluster import Cluster
from oncestream.client.common.errors import BrokerResponseError
from oncestream.protocol.api_keys import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, LIST_CONFIG_RESOURCES
from oncestream.protocol.codec import build
from oncestream.protocol.config_resources import RESOURCE_CLIENT_METRICS

T = TypeVar("T")
_SET, _DELETE = 0, 1


class ClientMetricsAdmin:
    """Mixed into ``Admin``; uses its ``_run`` and ``_cluster``."""

    _cluster: Cluster

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:  # provided by Admin
        raise NotImplementedError

    def alter_client_metrics(self, name: str, configs: Mapping[str, str | None], *, validate_only: bool = False,
                             timeout: float | None = None) -> None:
        """Set (a value) or delete (None) configs of the subscription ``name`` (``metrics``,
        ``interval.ms``, ``match``); ``KafkaException`` with the broker's code and reason on refusal."""
        self._incremental_alter_configs(RESOURCE_CLIENT_METRICS, name, configs, validate_only, timeout)

    def _incremental_alter_configs(self, resource_type: int, name: str, configs: Mapping[str, str | None],
                                   validate_only: bool, timeout: float | None) -> None:
        """IncrementalAlterConfigs of one resource: SET a value, DELETE for None."""
        async def run() -> None:
            def make(m: Any, version: int) -> Any:
                return build(m.IncrementalAlterConfigsRequest, validate_only=validate_only, resources=(
                    build(m.AlterConfigsResource, resource_type=resource_type, resource_name=name,
                          configs=tuple(build(m.AlterableConfig, name=key, config_operation=_DELETE if v is None else _SET,
                                              value=v) for key, v in configs.items())),))

            response = await self._cluster.send(None, INCREMENTAL_ALTER_CONFIGS, make)
            for r in response.responses:
                if r.error_code:
                    raise BrokerResponseError(int(r.error_code), r.error_message or "")

        self._run(run(), timeout)

    def describe_client_metrics(self, name: str, timeout: float | None = None) -> dict[str, str | None]:
        """Every config of the subscription ``name`` (defaults for those it does not set)."""
        async def run() -> dict[str, str | None]:
            def make(m: Any, version: int) -> Any:
                return build(m.DescribeConfigsRequest, include_synonyms=False, include_documentation=False,
                             resources=(build(m.DescribeConfigsResource, resource_type=RESOURCE_CLIENT_METRICS,
                                              resource_name=name, configuration_keys=None),))

            response = await self._cluster.send(None, DESCRIBE_CONFIGS, make)
            result = response.results[0]
            if result.error_code:
                raise BrokerResponseError(int(result.error_code), result.error_message or "")
            return {c.name: c.value for c in result.configs}

        return self._run(run(), timeout)

    def list_client_metrics(self, timeout: float | None = None) -> list[str]:
        """The names of the ClientMetrics subscriptions (ListConfigResources)."""
        async def run() -> list[str]:
            def make(m: Any, version: int) -> Any:
                if version >= 1:
                    return build(m.ListConfigResourcesRequest, resource_types=(RESOURCE_CLIENT_METRICS,))
                return build(m.ListConfigResourcesRequest)

            response = await self._cluster.send(None, LIST_CONFIG_RESOURCES, make)
            if response.error_code:
                raise BrokerResponseError(int(response.error_code), "ListConfigResources")
            return sorted(r.resource_name for r in response.config_resources)

        return self._run(run(), timeout)
