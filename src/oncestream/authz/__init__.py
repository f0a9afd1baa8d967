"""Authorization (issue 14 point 4): the StandardAuthorizer decision (``authorizer``) and durable
ACL storage (``store``), over the ACL bindings and filters of ``oncestream.protocol.acl`` (Kafka's
wire codes, shared with the client's admin). Sans-io: nothing here reads a socket or the clock;
the broker passes the principal and host of the connection in."""
