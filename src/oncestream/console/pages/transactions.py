"""Transactions: every transactional id (state, producer, partitions, age, timeout), prepared
KIP-939 transactions, hanging transactions with the reason in words, the producers of a partition
(DescribeProducers); abort a hanging transaction and complete a prepared one, each behind a
confirmation page where the user types the transaction's name, each audited.

The model is :mod:`oncestream.console.transactions_view` (sans-io), the cluster calls
:mod:`oncestream.console.transactions_access`.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from oncestream.client.admin.admin import AbortTransactionSpec
from oncestream.console.audit import FAILED, OK
from oncestream.console.transactions_access import (
    TransactionActionError,
    abort_hanging,
    complete_prepared,
    describe_producers,
    read_offsets,
    read_snapshot,
)
from oncestream.console.transactions_view import (
    OpenPartitionTransaction,
    TransactionsSnapshot,
    format_duration_ms,
)
from oncestream.console.web import audit, error_text, render, state

# The list refreshes itself this often (console.js, data-live-ms).
LIVE_REFRESH_MS = 2000


class BadRequest(ValueError):
    """A request missing or misspelling a parameter, said in words."""


def _int(params: Any, name: str) -> int:
    raw = params.get(name)
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        raise BadRequest(f"{name} must be a whole number, not {raw!r}") from None


def _text(params: Any, name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{name} is required")
    return value


async def _snapshot(request: Request, *also_describe: str) -> TransactionsSnapshot:
    return await state(request).kafka.run(lambda admin: read_snapshot(admin, also_describe=also_describe))


def _context(snapshot: TransactionsSnapshot | None) -> dict[str, Any]:
    return {"snap": snapshot, "duration": format_duration_ms, "live_ms": LIVE_REFRESH_MS}


async def _list_with_notice(request: Request, notice: str) -> Response:
    """The list after a change, with what was done (rendered, not redirected: a notice in a URL
    could be forged by a link)."""
    try:
        snapshot = await _snapshot(request)
    except Exception:  # noqa: BLE001 - the change is done; the list shows at the next refresh
        return render(request, "transactions.html", {**_context(None), "notice": notice})
    return render(request, "transactions.html", {**_context(snapshot), "notice": notice})


async def transactions_list(request: Request) -> Response:
    try:
        snapshot = await _snapshot(request)
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "transactions.html", {**_context(None), "error": f"Cannot read transactions: {error_text(exc)}"},
                      status=502)
    return render(request, "transactions.html", _context(snapshot))


async def transaction_page(request: Request) -> Response:
    try:
        tid = _text(request.query_params, "id")
        snapshot = await _snapshot(request, tid)
    except BadRequest as exc:
        return render(request, "transaction.html", {**_context(None), "row": None, "error": str(exc)}, status=400)
    except Exception as exc:  # noqa: BLE001
        return render(request, "transaction.html", {**_context(None), "row": None,
                                                    "error": f"Cannot read transactions: {error_text(exc)}"}, status=502)
    row = snapshot.transaction(tid)
    if row is None:
        return render(request, "transaction.html", {**_context(snapshot), "row": None,
                                                    "error": f"No transactional id {tid!r} is known to any coordinator"},
                      status=404)
    return render(request, "transaction.html", {**_context(snapshot), "row": row})


async def partition_producers(request: Request) -> Response:
    try:
        topic, partition = _text(request.query_params, "topic"), _int(request.query_params, "partition")
    except BadRequest as exc:
        return render(request, "transaction_producers.html", {"producers": None, "error": str(exc)}, status=400)
    key = (topic, partition)

    def read(admin: Any) -> tuple[list[Any], Any]:
        producers = describe_producers(admin, {key}).get(key, [])
        return producers, read_offsets(admin, {key}).get(key)

    try:
        producers, offsets = await state(request).kafka.run(read)
    except Exception as exc:  # noqa: BLE001
        return render(request, "transaction_producers.html",
                      {"producers": None, "topic": topic, "partition": partition,
                       "error": f"Cannot describe the producers of {topic}[{partition}]: {error_text(exc)}"}, status=502)
    return render(request, "transaction_producers.html",
                  {"producers": producers, "offsets": offsets, "topic": topic, "partition": partition})


def _abort_target(params: Any) -> tuple[AbortTransactionSpec, str | None]:
    spec = AbortTransactionSpec(_text(params, "topic"), _int(params, "partition"), _int(params, "producer_id"),
                                _int(params, "producer_epoch"), _int(params, "coordinator_epoch"))
    return spec, params.get("transactional_id") or None


def _confirm_word(spec: AbortTransactionSpec, tid: str | None) -> str:
    """What the user types to confirm an abort: the transactional id, or ``producer N`` when no
    coordinator knows one."""
    return tid if tid else f"producer {spec.producer_id}"


def _find_hanging(snapshot: TransactionsSnapshot, spec: AbortTransactionSpec) -> OpenPartitionTransaction | None:
    return next((o for o in snapshot.hanging if (o.topic, o.partition, o.producer_id) ==
                 (spec.topic, spec.partition, spec.producer_id)), None)


async def abort_confirm(request: Request) -> Response:
    """The confirmation page of an abort: what will be aborted, how, and the field to type."""
    try:
        spec, tid = _abort_target(request.query_params)
    except BadRequest as exc:
        return render(request, "transaction_abort.html", {"spec": None, "error": str(exc)}, status=400)
    return render(request, "transaction_abort.html", {"spec": spec, "transactional_id": tid,
                                                      "confirm_word": _confirm_word(spec, tid)})


async def abort_submit(request: Request) -> Response:
    form = await request.form()
    try:
        spec, tid = _abort_target(form)
    except BadRequest as exc:
        return render(request, "transaction_abort.html", {"spec": None, "error": str(exc)}, status=400)
    expected = _confirm_word(spec, tid)
    context = {"spec": spec, "transactional_id": tid, "confirm_word": expected}
    if form.get("confirm") != expected:
        return render(request, "transaction_abort.html",
                      {**context, "error": f"Not aborted: type {expected!r} to confirm"}, status=400)
    target = f"{expected} on {spec.topic}[{spec.partition}]"
    try:
        snapshot = await _snapshot(request)
    except Exception as exc:  # noqa: BLE001
        return render(request, "transaction_abort.html", {**context, "error": f"Cannot read transactions: {error_text(exc)}"},
                      status=502)
    hanging = _find_hanging(snapshot, spec)
    if hanging is None:
        return render(request, "transaction_abort.html",
                      {**context, "error": f"Not aborted: producer {spec.producer_id} holds no hanging transaction on "
                                           f"{spec.topic}[{spec.partition}] (any more)"}, status=409)
    details = {"topic": spec.topic, "partition": spec.partition, "producer_id": spec.producer_id,
               "producer_epoch": spec.producer_epoch, "coordinator_epoch": spec.coordinator_epoch,
               "reasons": [f.kind for f in hanging.flags]}
    try:
        outcome = await state(request).kafka.run(lambda admin: abort_hanging(admin, spec))
    except Exception as exc:  # noqa: BLE001 - shown, and audited as failed
        message = str(exc) if isinstance(exc, TransactionActionError) else error_text(exc)
        audit(request, "transaction.abort", target, FAILED, error=message, **details)
        return render(request, "transaction_abort.html", {**context, "error": f"Abort failed: {message}"}, status=502)
    audit(request, "transaction.abort", target, OK, how=outcome.how, **details)
    return await _list_with_notice(request, outcome.message)


def _complete_target(params: Any) -> tuple[str, int]:
    return _text(params, "transactional_id"), _int(params, "producer_id")


async def complete_confirm(request: Request) -> Response:
    try:
        tid, producer_id = _complete_target(request.query_params)
    except BadRequest as exc:
        return render(request, "transaction_complete.html", {"transactional_id": None, "error": str(exc)}, status=400)
    return render(request, "transaction_complete.html", {"transactional_id": tid, "producer_id": producer_id})


async def complete_submit(request: Request) -> Response:
    form = await request.form()
    try:
        tid, producer_id = _complete_target(form)
    except BadRequest as exc:
        return render(request, "transaction_complete.html", {"transactional_id": None, "error": str(exc)}, status=400)
    context = {"transactional_id": tid, "producer_id": producer_id}
    decision = form.get("decision")
    if decision not in ("commit", "abort"):
        return render(request, "transaction_complete.html", {**context, "error": "Choose commit or abort"}, status=400)
    if form.get("confirm") != tid:
        return render(request, "transaction_complete.html",
                      {**context, "error": f"Not completed: type {tid!r} to confirm"}, status=400)
    console = state(request)
    conf = console.kafka.client_conf()
    details = {"decision": decision, "producer_id": producer_id}
    try:
        message = await console.kafka.blocking(lambda: complete_prepared(conf, tid, producer_id, decision == "commit"))
    except Exception as exc:  # noqa: BLE001 - shown, and audited as failed
        text = str(exc) if isinstance(exc, TransactionActionError) else error_text(exc)
        audit(request, "transaction.complete", tid, FAILED, error=text, **details)
        return render(request, "transaction_complete.html", {**context, "error": f"Not completed: {text}"}, status=502)
    audit(request, "transaction.complete", tid, OK, **details)
    return await _list_with_notice(request, message)


def _open_json(o: OpenPartitionTransaction) -> dict[str, Any]:
    return {"topic": o.topic, "partition": o.partition, "producer_id": o.producer_id,
            "producer_epoch": o.producer_epoch, "coordinator_epoch": o.coordinator_epoch,
            "start_offset": o.start_offset, "transactional_id": o.transactional_id,
            "last_stable_offset": o.offsets.last_stable_offset if o.offsets else None,
            "high_watermark": o.offsets.high_watermark if o.offsets else None,
            "flags": [{"kind": f.kind, "explanation": f.explanation} for f in o.flags]}


async def transactions_api(request: Request) -> Response:
    snapshot = await _snapshot(request)
    return JSONResponse({
        "now_ms": snapshot.now_ms,
        "transactions": [{
            "transactional_id": t.transactional_id, "state": t.state, "producer_id": t.producer_id,
            "producer_epoch": t.producer_epoch, "partitions": [list(p) for p in t.partitions],
            "start_time_ms": t.start_time_ms, "age_ms": t.age_ms, "timeout_ms": t.timeout_ms,
            "two_phase_commit": t.two_phase_commit, "prepared": t.prepared, "hanging": t.hanging, "error": t.error,
            "flags": [{"kind": f.kind, "explanation": f.explanation} for f in t.flags],
        } for t in snapshot.transactions],
        "hanging": [_open_json(o) for o in snapshot.hanging],
        "orphans": [_open_json(o) for o in snapshot.orphans],
    })


routes: list[BaseRoute] = [
    Route("/transactions", transactions_list, methods=["GET"], name="transactions"),
    Route("/transactions/view", transaction_page, methods=["GET"], name="transaction"),
    Route("/transactions/producers", partition_producers, methods=["GET"], name="transaction_producers"),
    Route("/transactions/abort", abort_confirm, methods=["GET"], name="transaction_abort_confirm"),
    Route("/transactions/abort", abort_submit, methods=["POST"], name="transaction_abort"),
    Route("/transactions/complete", complete_confirm, methods=["GET"], name="transaction_complete_confirm"),
    Route("/transactions/complete", complete_submit, methods=["POST"], name="transaction_complete"),
    Route("/api/transactions", transactions_api, methods=["GET"], name="transactions_api"),
]
