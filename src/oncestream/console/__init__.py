"""``oncestream console``: a web console for any Kafka-protocol cluster (issue 26).

What it shows: the cluster (brokers, controller, cluster id), topics (partitions with start/end
offsets and the last stable offset, a message browser that marks the records of aborted
transactions, produce), consumer groups (classic, KIP-848 consumer and share groups, lag per
partition and over time, offset resets of empty groups), transactions, the SQL server and ACLs;
every change it makes is audited with the console user who made it.

The stack and why: Starlette (ASGI routing, ~one dependency), Jinja2 templates rendered on the
server with autoescape on, python-multipart for forms, served by hypercorn (the HTTP server the
SQL server already runs, TLS included). No front-end build and no CDN: every page is plain HTML
and one stylesheet from ``console/static``, so the console works on a machine without network
access and there is no JavaScript toolchain to keep up to date; a little hand-written JavaScript
(``static/console.js``) only refreshes the parts of a page that update live.

Layout: ``app.create_app`` gathers the ``routes`` list of every module of ``console.pages``
(one module per page, dropped in without touching the app), ``auth`` (login, sessions, CSRF),
``audit`` (the change log), ``kafka`` (the one object through which pages reach the cluster:
the cluster credentials stay in this process), ``web`` (rendering helpers every page uses),
``serve`` (hypercorn) and ``command`` (the CLI command).
"""
