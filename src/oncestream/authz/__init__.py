"""Authorization (issue 14 point 4): ACL bindings and filters (``acl``), the StandardAuthorizer
decision (``authorizer``) and durable ACL storage (``store``). Sans-io: nothing here reads a
socket or the clock; the broker passes the principal and host of the connection in."""
