"""Deletion in one place: retention expiry, purges and erasures.

- :mod:`lake.deletion.target` — what an erasure targets (a user, conversation or turn);
- :mod:`lake.deletion.policy` — a row's expiry under the policy, the texts an expired role
  takes out of its TurnLog, when a quarantined line goes;
- :mod:`lake.deletion.plan` — planning a purge or an erasure (read only; the dry run) and
  its manifest;
- :mod:`lake.deletion.runner` — running a plan step by step, resumable after a crash;
- :mod:`lake.deletion.audit` — one audit row per job.

The jobs that take the writer lock and rebuild indexes around them (``retention apply``,
``retention purge``, ``erase``) are :mod:`pipeline.retention`.
"""
