"""Kafka's config resource type codes (``ConfigResource.Type``), as DescribeConfigs,
AlterConfigs and IncrementalAlterConfigs carry them. One home for the broker's config APIs
(``broker/config_admin.py``) and the client's ``Admin.describe_configs``."""

from __future__ import annotations

RESOURCE_TOPIC = 2
RESOURCE_GROUP = 32  # KIP-848 / KIP-932 group configs (not the ACL resource type GROUP = 3)
RESOURCE_BROKER = 4
RESOURCE_CLIENT_METRICS = 16  # KIP-714 ClientMetrics subscriptions
