"""The package's HTML pages (``src/rocmlab/templates``): one jinja2 environment per process, with
autoescaping (learner ids, error text and run output reach these pages), so that a class's
feedback template is compiled once, not once per learner."""

from __future__ import annotations

from functools import cache


@cache
def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined

    return Environment(
        loader=PackageLoader("rocmlab", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_page(template: str, **context) -> str:
    return _environment().get_template(template).render(**context)
