"""Grading a class: the instructor's class page (``analytics``) and grading in shards (``shards``)."""
