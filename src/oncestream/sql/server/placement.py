"""Where a node's persistent queries run: the query-assignment group (``assignment``) places
them across the cluster, ``local_queries`` starts and stops this node's share on the runtime, and
this module answers what the node reports about them (state, owner, cluster status)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from oncestream.sql.engine.interface import PersistentQueryRunner
from oncestream.sql.server.assignment import Assignment, QueryAssignment
from oncestream.sql.server.local_queries import LocalQueries, StartSpec
from oncestream.sql.server.metastore import QueryRunState
from oncestream.sql.server.node_context import NodeContext


class QueryPlacement:
    """This node's part in placing persistent queries (see the module docstring)."""

    def __init__(self, context: NodeContext, runtime: PersistentQueryRunner,
                 store_lags: Callable[[], dict[str, Any]]) -> None:
        self._context = context
        self._store_lags = store_lags
        self._query_offset = -1          # offset of the last command that changed the query set
        self.url: str | None = None
        self.local = LocalQueries(runtime, self._start_spec, self._queries_changed)
        self._assignment: QueryAssignment | None = None

    def start(self) -> None:
        self.local.start()

    def join_cluster(self, url: str) -> None:
        """Join the query-assignment group as ``url`` (once the REST API listens there)."""
        settings = self._context.settings
        runner = self._context.runner
        self.url = url
        self._assignment = QueryAssignment(
            service_id=settings.service_id, url=url, client_conf=settings.client_conf,
            known_queries=self._known_queries, owned=self.local.owned, errors=self.local.errors,
            wait_for_offset=lambda offset, timeout_s: runner.wait_position(offset + 1, timeout_s),
            on_assignment=self._on_assignment, session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms, instance_id=settings.instance_id)
        self._assignment.start()

    def stop(self) -> None:
        """Stop the local queries at a batch boundary, then leave the group (so no other node
        starts a query while it still runs here)."""
        self.local.stop()
        if self._assignment is not None:
            self._assignment.stop()

    def queries_changed_at(self, offset: int) -> None:
        """The command at ``offset`` started or stopped queries (runner thread, under its lock)."""
        self._query_offset = offset
        self.local.poke()
        self._queries_changed()

    # --- callbacks of the assignment member and of local_queries -------------------------------------

    def _known_queries(self) -> tuple[int, list[str]]:
        with self._context.runner.lock:
            return self._query_offset, sorted(q.query_id for q in self._context.metastore.queries())

    def _on_assignment(self, assignment: Assignment | None) -> None:
        self.local.set_desired(set(assignment.mine) if assignment is not None else set())

    def _queries_changed(self) -> None:
        if self._assignment is not None:
            self._assignment.poke()

    def _start_spec(self, query_id: str) -> StartSpec | None:
        metastore = self._context.metastore
        with self._context.runner.lock:
            info = metastore.query(query_id)
            if info is None:
                return None
            sink = metastore.source(info.sink)
            analyzed = metastore.analyzed(query_id)
            properties = metastore.query_properties(query_id)
            paused = metastore.run_state(query_id) is QueryRunState.PAUSED
        if sink is None or analyzed is None:
            return None
        return StartSpec(info, analyzed, sink, properties, paused)

    # --- what the node reports ------------------------------------------------------------------------

    def query_state(self, query_id: str) -> tuple[str, str | None, str | None]:
        """(state, error, owner URL) of a persistent query as this node knows it: the node that
        owns it says what it does (PAUSED once stopped there); the others say PAUSED as soon as
        their metastore holds the PAUSE."""
        local = self.local.state(query_id)
        if local is not None:
            return local[0], local[1], self.url
        assignment = self._assignment.current if self._assignment is not None else None
        owner = assignment.owner_url(query_id) if assignment is not None else None
        with self._context.runner.lock:
            paused = self._context.metastore.run_state(query_id) is QueryRunState.PAUSED
        if paused:
            return "PAUSED", None, owner
        if assignment is None or owner is None:
            return "PENDING", None, None
        error = assignment.errors.get(query_id)
        return ("ERROR" if error else "RUNNING"), error, owner

    def host_statuses(self, query_id: str) -> dict[str, str]:
        """ksqlHostQueryStatus: per node of the cluster, the query's state there (RUNNING, ERROR or
        PAUSED only on the node it is placed on)."""
        state, _error, owner = self.query_state(query_id)
        return {host_port(url): (state if url == owner else "NOT_RUNNING") for url in self._urls()}

    def _urls(self) -> list[str]:
        assignment = self._assignment.current if self._assignment is not None else None
        return sorted(set(assignment.urls.values())) if assignment is not None else ([self.url] if self.url else [])

    def cluster_status(self) -> dict[str, Any]:
        """``/clusterStatus``: every node of the group, the queries placed there, this node's store lags."""
        assignment = self._assignment.current if self._assignment is not None else None
        now_ms = int(time.time() * 1000)
        status = {}
        for url in self._urls():
            queries = [q for m, ids in (assignment.queries.items() if assignment else ()) for q in ids
                       if assignment is not None and assignment.urls.get(m) == url]
            status[host_port(url)] = {"hostAlive": True, "lastStatusUpdateMs": now_ms,
                                      "activeStandbyPerQuery": {q: {"activeStores": [], "standByStores": []}
                                                                for q in sorted(queries)},
                                      "hostStoreLags": {"stateStoreLags": self._store_lags() if url == self.url else {},
                                                        "updateTimeMs": now_ms}}
        return {"clusterStatus": status}


def host_port(url: str) -> str:
    return url.split("://", 1)[-1].rstrip("/")
