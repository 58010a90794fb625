"""The course's sources as typed objects: labs and their ``lab.toml`` (``catalog``), ``lab.py``
cells and conventions (``source``), a lab's notebook in one language (``notebooks``), the lab
notebooks in a learner's folder (``learner_labs``) and the README's lab table (``lab_table``)."""
