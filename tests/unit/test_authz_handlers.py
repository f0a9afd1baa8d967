"""CreateAcls/DeleteAcls persist before they apply (issue 14 point 4: ACLs stored durably): when
the ACL file cannot be written the answer is KAFKA_STORAGE_ERROR and the authorizer is
unchanged, so no client is ever told of (or governed by) an ACL a restart would lose."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

from kio.schema.create_acls.v3.response import CreateAclsResponse
from kio.schema.delete_acls.v3.response import DeleteAclsResponse
from kio.schema.errors import ErrorCode

from oncestream.authz.authorizer import StandardAuthorizer
from oncestream.authz.store import AclStore
from oncestream.broker.handlers import acls
from oncestream.broker.principal import ANONYMOUS_PRINCIPAL
from oncestream.protocol import api_keys as k
from oncestream.protocol.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from oncestream.protocol.codec import RequestHeader
from oncestream.protocol.schemas import request_module
from tests.support.narrow import of_type

EXISTING = AclBinding(ResourceType.TOPIC, "old", PatternType.LITERAL, "User:a", "*", AclOperation.READ,
                      AclPermissionType.ALLOW)


class _BrokenDisk(AclStore):
    def save(self, acls: list[AclBinding]) -> None:
        raise OSError(28, "No space left on device")


def _state(store: AclStore):
    # Outside a connection the principal is ANONYMOUS: make it the super user.
    return SimpleNamespace(
        authorizer=StandardAuthorizer([EXISTING], super_users=[ANONYMOUS_PRINCIPAL]), acl_store=store,
        disk_executor=ThreadPoolExecutor(1), acl_write_lock=asyncio.Lock())


def _create(state) -> CreateAclsResponse:
    m = request_module(k.CREATE_ACLS, 3)
    request = m.CreateAclsRequest(creations=(m.AclCreation(
        resource_type=2, resource_name="new", resource_pattern_type=3, principal="User:b", host="*", operation=3,
        permission_type=3),))
    return of_type(asyncio.run(acls.handle_create(state, RequestHeader(k.CREATE_ACLS, 3, 1, None, 0), request)),
                   CreateAclsResponse)


def _delete_all(state) -> DeleteAclsResponse:
    m = request_module(k.DELETE_ACLS, 3)
    request = m.DeleteAclsRequest(filters=(m.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
        host_filter=None, operation=1, permission_type=1),))
    return of_type(asyncio.run(acls.handle_delete(state, RequestHeader(k.DELETE_ACLS, 3, 1, None, 0), request)),
                   DeleteAclsResponse)


def test_create_and_delete_are_refused_and_not_applied_when_the_file_cannot_be_written(tmp_path: Path) -> None:
    state = _state(_BrokenDisk(tmp_path))
    assert [r.error_code for r in _create(state).results] == [ErrorCode.kafka_storage_error]
    assert [r.error_code for r in _delete_all(state).filter_results] == [ErrorCode.kafka_storage_error]
    assert state.authorizer.acls() == [EXISTING]


def test_create_and_delete_are_stored_before_the_answer(tmp_path: Path) -> None:
    state = _state(AclStore(tmp_path))
    assert [r.error_code for r in _create(state).results] == [ErrorCode.none]
    assert {a.resource_name for a in AclStore(tmp_path).load()} == {"old", "new"}
    [result] = _delete_all(state).filter_results
    assert result.error_code == ErrorCode.none
    assert len(result.matching_acls) == 2
    assert AclStore(tmp_path).load() == []
    assert state.authorizer.acls() == []
