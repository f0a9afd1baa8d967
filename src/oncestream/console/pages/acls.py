"""ACLs: every ACL binding of the cluster (DescribeAcls with a match-all filter), read-only.
A cluster without an authorizer answers SECURITY_DISABLED, shown as such."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from oncestream.client.admin.admin_acls import AclBindingFilter
from oncestream.console.web import error_text, render, state


async def acls_page(request: Request) -> Response:
    try:
        bindings = await state(request).kafka.run(lambda admin: admin.describe_acls(AclBindingFilter(), timeout=15.0))
    except Exception as exc:  # noqa: BLE001 - any client failure is shown on the page
        return render(request, "acls.html", {"bindings": None,
                                             "error": f"Cannot describe the ACLs: {error_text(exc)}"}, status=502)
    ordered = sorted(bindings, key=lambda b: (b.resource_type.name, b.resource_name, b.principal, b.operation.name))
    return render(request, "acls.html", {"bindings": ordered})


routes: list[BaseRoute] = [Route("/acls", acls_page, methods=["GET"], name="acls")]
