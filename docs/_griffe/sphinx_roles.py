"""A griffe extension that renders the docstrings' Sphinx roles as mkdocstrings links.

The docstrings are Google style but cross-reference with Sphinx roles
(``:class:`~asyncreader.Session```), which read well in the source, in ``help()`` and in
editors. Rewriting them when the API reference is built keeps them so: a role naming
``asyncreader.X...`` becomes a link that ``mkdocs build --strict`` must resolve (so a
reference to a renamed or private name fails the build), and any other role (a relative
``:meth:`reset```, the standard library, anyio) becomes inline code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|const):`(~?)([^`]+)`")
# reStructuredText's "paragraph::" before an indented literal block.
_LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.M)


def rewrite(text: str) -> str:
    """Sphinx roles as Markdown links or code, and ``::`` literal-block markers as ``:``."""

    def role(match: re.Match[str]) -> str:
        short, target = match.group(1) == "~", match.group(2).strip()
        if target.endswith("()"):
            target = target[:-2]
        label = target.rsplit(".", 1)[-1] if short else target
        if target.startswith("asyncreader."):
            return f"[`{label}`][{target}]"
        return f"`{label}`"

    return _LITERAL_BLOCK.sub(":", _ROLE.sub(role, text))


class SphinxRoles(griffe.Extension):
    """Rewrite each loaded object's docstring with :func:`rewrite`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Called by griffe for every object it loads."""
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
