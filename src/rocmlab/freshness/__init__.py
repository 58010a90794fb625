"""The release matrix and what is made from it: ``matrix`` (``env/matrix.toml``), the CPU
environments and their containers and jobs (``environments``, ``containers``, ``jobs``), what
upstream published and the matrix changes it proposes (``upstream``, ``proposals``, ``pins``,
``releases``). ``rocmlab.report`` turns runs on these environments into the freshness table."""
