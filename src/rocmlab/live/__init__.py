"""The live workshop: learners submit during the day, workers grade each attempt as it comes,
the instructor watches the room. It sits above ``hub`` (accounts, delivery, the exchange's safe
copy, the groups and the completion rule) and beside nothing that imports it back.

- the queue: ``queue`` (SQLite in WAL mode: leases, idempotent submits, the rate limit, kept
  seeds), ``attempts`` (what an attempt is), ``tables`` (the service's own tables in its file);
- grading: ``worker`` (``rocmlab live worker``), ``graders`` (the graders a worker keeps open),
  ``attempted`` (exercises left as released), ``sizing`` (docs/hub.md's table), ``command`` (the CLI),
  ``supervise`` (the workers' states on the page; a refused worker the hub runs waits, said once);
- the service the hub manages: ``service`` (routes, submits), ``handlers`` (its settings and base
  handlers), ``worker_api`` (the workers' queue over HTTP), ``collect`` and ``recollect`` (a
  learner's submission copied from the exchange, and again at start);
- the room: ``view`` (figures from the attempts), ``page`` (the instructor's and learner's pages),
  ``hints`` and ``notify`` (hints as a file and a JupyterLab notification), ``regrade``
  (regrade everyone), ``certificate`` (issued once, stored signed, verified publicly).
"""
