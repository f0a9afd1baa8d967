"""InitProducerId (key 22) for idempotent producers.

Without a transactional id Kafka always hands out a fresh producer id with epoch 0, also when the
client sends its current id and epoch to recover from a sequence error (KIP-360): a new id gives
it a clean sequence space. Transactional ids arrive with the transaction coordinator.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from oncestream.broker.state import BrokerState
from oncestream.protocol.api_keys import INIT_PRODUCER_ID
from oncestream.protocol.codec import RequestHeader, build, response_module


def handle(state: BrokerState, header: RequestHeader, request) -> object:
    m = response_module(INIT_PRODUCER_ID, header.api_version)
    if request.transactional_id is not None:
        return build(
            m.InitProducerIdResponse,
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    return build(
        m.InitProducerIdResponse,
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        producer_id=state.producer_ids.next_id(),
        producer_epoch=0,
    )
