"""Every metric name the broker exports: Kafka's JMX bean names as the Prometheus JMX exporter's
example Kafka configuration (``example_configs/kafka-2_0_0.yml``: lowercase output names,
``<type=T, name=NPerSec, k=v><>Count`` -> ``kafka_<domain>_<t>_<n>_total{k}``,
``<type=T, name=N, k=v><>Value`` -> ``kafka_<domain>_<t>_<n>{k}``) turns them into Prometheus
names; what Kafka has no bean for carries the ``oncestream_`` prefix. The table with the Kafka
names is docs/metrics.md; tests/unit/test_metrics_dashboard.py checks the dashboard against
``ALL``."""

from __future__ import annotations

from typing import Final

# kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=T (and the others per topic)
BYTES_IN: Final = "kafka_server_brokertopicmetrics_bytesin"
MESSAGES_IN: Final = "kafka_server_brokertopicmetrics_messagesin"
BYTES_OUT: Final = "kafka_server_brokertopicmetrics_bytesout"
# kafka.network:type=RequestMetrics,name=RequestsPerSec,request=R,version=V
REQUESTS: Final = "kafka_network_requestmetrics_requests"
# kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=R,error=E
ERRORS: Final = "kafka_network_requestmetrics_errors"
# kafka.network:type=RequestMetrics,name=TotalTimeMs|RequestQueueTimeMs|LocalTimeMs|
# ThrottleTimeMs|ResponseSendTimeMs,request=R (histograms in ms)
TOTAL_TIME: Final = "kafka_network_requestmetrics_totaltimems"
QUEUE_TIME: Final = "kafka_network_requestmetrics_requestqueuetimems"
LOCAL_TIME: Final = "kafka_network_requestmetrics_localtimems"
THROTTLE_TIME: Final = "kafka_network_requestmetrics_throttletimems"
SEND_TIME: Final = "kafka_network_requestmetrics_responsesendtimems"
# kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N: connection-count,
# failed-authentication-total
CONNECTIONS: Final = "kafka_server_socket_server_metrics_connection_count"
FAILED_AUTH: Final = "kafka_server_socket_server_metrics_failed_authentication"
# kafka.log:type=Log,name=Size|LogStartOffset|LogEndOffset,topic=T,partition=P
LOG_SIZE: Final = "kafka_log_log_size"
LOG_START: Final = "kafka_log_log_logstartoffset"
LOG_END: Final = "kafka_log_log_logendoffset"
HIGH_WATERMARK: Final = "oncestream_log_highwatermark"
LSO_LAG: Final = "oncestream_log_laststableoffsetlag"  # high watermark - LSO
# kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs (histogram in ms)
FLUSH_TIME: Final = "kafka_log_logflushstats_logflushrateandtimems"
# kafka.network:type=SocketServer,name=MemoryPoolAvailable|MemoryPoolUsed
MEMORY_POOL_AVAILABLE: Final = "kafka_network_socketserver_memorypoolavailable"
MEMORY_POOL_USED: Final = "kafka_network_socketserver_memorypoolused"
# The transaction coordinator (Kafka has no bean for these; KIP-664's tooling reads them).
TXN_OPEN: Final = "oncestream_transactions_open"
TXN_PREPARED: Final = "oncestream_transactions_prepared"
TXN_COMPLETING: Final = "oncestream_transactions_completing"
TXN_HANGING: Final = "oncestream_transactions_hanging"
TXN_OLDEST_AGE: Final = "oncestream_transactions_oldest_open_age_seconds"
# kafka.server:type=group-coordinator-metrics,name=group-count,protocol=P,state=S (KIP-848)
GROUP_COUNT: Final = "kafka_server_group_coordinator_metrics_group_count"
# Per group: its state (1 for the state it is in), and the names kafka_exporter gives the
# committed offset and its lag.
GROUP_STATE: Final = "oncestream_group_state"
GROUP_OFFSET: Final = "kafka_consumergroup_current_offset"
GROUP_LAG: Final = "kafka_consumergroup_lag"

COUNTERS: Final = (BYTES_IN, MESSAGES_IN, BYTES_OUT, REQUESTS, ERRORS, FAILED_AUTH)
HISTOGRAMS: Final = (TOTAL_TIME, QUEUE_TIME, LOCAL_TIME, THROTTLE_TIME, SEND_TIME, FLUSH_TIME)
GAUGES: Final = (
    CONNECTIONS, LOG_SIZE, LOG_START, LOG_END, HIGH_WATERMARK, LSO_LAG, MEMORY_POOL_AVAILABLE, MEMORY_POOL_USED,
    TXN_OPEN, TXN_PREPARED, TXN_COMPLETING, TXN_HANGING, TXN_OLDEST_AGE, GROUP_COUNT, GROUP_STATE, GROUP_OFFSET, GROUP_LAG,
)


def exposed_names() -> frozenset[str]:
    """Every sample name a scrape can show (counters' ``_total``, histograms' series)."""
    out: set[str] = set(GAUGES)
    out.update(f"{name}_total" for name in COUNTERS)
    out.update(f"{name}{suffix}" for name in HISTOGRAMS for suffix in ("_bucket", "_count", "_sum"))
    return frozenset(out)
