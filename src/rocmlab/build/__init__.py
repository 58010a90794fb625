"""``rocmlab build``: student notebooks from ``solutions/`` into ``labs/`` (``assignments``,
nbgrader's ``generate_assignment``), proven by running both versions (``verify``), and the
command (``command``)."""
