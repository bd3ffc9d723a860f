"""The HTML pages' templates (kdiag/report/templates/), rendered by Jinja2
with autoescaping on: every value a template writes is escaped unless it is
markup a template made (a macro's result), so text from a stranger's bundle
cannot become markup by a call site forgetting to escape it.

Before escaping, every value is shown as ``shown`` says: controls, format
characters (bidirectional overrides) and lone surrogates as escapes rather
than interpreted or hidden by the browser, clipped to SHOWN's length.
"""
from __future__ import annotations

import functools
import re

from jinja2 import Environment, PackageLoader, StrictUndefined

from kdiag.report.page_limits import clipped
from kdiag.visible import visible

# A template's line breaks and indentation are for its reader: the pages
# keep none between tags, where a space would show between inline boxes.
_LAYOUT = re.compile(r"\n[ \t]*")


def shown(value):
    """A value as page text, before escaping; markup passes unchanged."""
    if hasattr(value, "__html__"):
        return value
    return visible(clipped(value if isinstance(value, str) else str(value)))


class _Joined(PackageLoader):
    def get_source(self, environment, template):
        source, filename, uptodate = super().get_source(environment, template)
        if template.endswith(".html"):
            source = _LAYOUT.sub("", source)
        return source, filename, uptodate


@functools.cache
def _env() -> Environment:
    return Environment(loader=_Joined("kdiag.report", "templates"), autoescape=True, finalize=shown,
                       undefined=StrictUndefined)


def render(name: str, **context) -> str:
    return _env().get_template(name).render(**context)


def macros(name: str):
    """A template's macros, callable from Python; each returns markup."""
    return _env().get_template(name).module
