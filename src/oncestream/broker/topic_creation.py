"""Topic creation off the event loop, for CreateTopics, CreatePartitions and Metadata's
auto-creation.

The log manager splits a creation in three (see ``LogManager.begin_create_topic``): the name is
reserved on the loop, the directories, segment files, fsyncs and metadata file are made on the
broker's disk threads, and the topic is installed back on the loop. Creating thousands of
partitions would otherwise stall every client for as long as it takes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from oncestream.broker.disk_step import run_disk_step
from oncestream.broker.state import BrokerState
from oncestream.errors import TopicAlreadyExistsError
from oncestream.log.manager import TopicBeingCreatedError, TopicCreation, TopicInfo

log = logging.getLogger(__name__)


async def run_creation(state: BrokerState, creation: TopicCreation) -> TopicInfo:
    """Run ``creation``'s file work on the disk threads, then install it (or free the name)."""
    return await run_disk_step(
        state, creation.run,
        finish=lambda: state.logs.finish_creation(creation),
        abort=lambda: state.logs.abort_creation(creation),
        what=f"creation of topic {creation.info.name!r}",
    )


async def auto_create_topic(state: BrokerState, name: str, num_partitions: int,
                            configs: Mapping[str, str]) -> TopicInfo:
    """Metadata's auto-creation: as CreateTopics, except that a name whose creation is under
    way gets TopicBeingCreatedError (LEADER_NOT_AVAILABLE: the client asks again)."""
    try:
        creation = state.logs.begin_create_topic(name, num_partitions, configs)
    except TopicAlreadyExistsError:
        if name in state.logs.topics():
            raise
        raise TopicBeingCreatedError(f"topic {name!r} is being created") from None
    return await run_creation(state, creation)
