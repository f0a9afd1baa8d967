"""Demo drivers shipped as public utilities, kept apart from the platform's own code.

Nothing under ``oncestream/demos`` is imported by the broker, the clients, the SQL server or the
Spark connector; these modules only drive them from outside, as a user would:

- ``broker_crash``: ``oncestream demo`` (``python -m oncestream.demos.broker_crash``, ``make
  broker-demo``): records stream through broker SIGKILLs and come out exactly once, in order.
- ``bank_transfers``: ``make demo`` (``python -m oncestream.demos.bank_transfers``): transfers
  through a Spark pipeline whose driver is SIGKILLed and restarted; balances checked exactly once.
"""
