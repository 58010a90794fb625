"""Running notebooks under limits: the worker process (``worker``), the papermill engine with
output caps and marked timeouts (``papermill_engine``), ``rocmlab run`` (``run``, ``schedule``,
``course_model``) and the run record it writes (``results``)."""
