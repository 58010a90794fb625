"""``rocmlab grade LAB --submissions DIR``: autograde a class with nbgrader, in parallel, sandboxed.

For each submission: validate it (a notebook of this lab, this version or older), restore the
lab's test and parameters cells from the source (edits, deletions and duplicates are flagged),
execute it in the chosen profile inside the sandbox (``rocmlab.sandbox.limits`` around
``rocmlab.execution.worker``), then hand the executed notebook to nbgrader's autograde (without its
own execution) to write the grades. Executions run ``--jobs`` at a time; grades are written by
the main thread alone, so the gradebook never sees two writers.

Outputs under ``--out``: ``course/`` (nbgrader's folders and, by default, the sqlite
gradebook), ``feedback/<student>/<lab>.html``, ``grades.csv`` (nbgrader's CSV exporter) and
``summary.json`` (per learner: score, flags, tests), ``class.html`` with its CSV files
(``analytics``).

Modules: ``submissions`` (finding, validating), ``cells`` (restoring and reading test cells),
``gradebook`` (nbgrader and its workarounds), ``feedback`` (the learner's page), ``grader``
(the class, in parallel), ``command`` (the CLI), ``analytics`` (the instructor's class page),
``shards`` (``--shard K/N`` and ``rocmlab grade merge``).
"""
