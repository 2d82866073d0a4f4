"""Griffe extension: read the Sphinx markup of the project's numpy-style docstrings.

The docstrings use a few reStructuredText constructs that Markdown does not
know. Before mkdocstrings parses a docstring, this extension rewrites:

* cross-reference roles (``:class:`~a.b.C```, ``:func:`f```, ``:mod:``, ``:data:``,
  ``:attr:``, ``:meth:``, ``:exc:``, ``:obj:``): a name of this package becomes
  an autorefs link (``~`` shows the last component only; a short name is
  looked up in the enclosing class and module), any other name (``torch.*``,
  ``torch_geometric.*``) becomes inline code;
* ``:math:`...``` becomes ``$...$`` and a ``.. math::`` block becomes a
  ``$$ ... $$`` block (``pymdownx.arithmatex``; the build hook turns both into
  MathML, so the pages need no JavaScript and no network);
* an ``Example`` heading becomes the numpy ``Examples`` section;
* a module attribute without a docstring takes its Sphinx ``#:`` comment
  (the lines right above the assignment) as its docstring;
* special methods of classes (``__repr__``, ``__enter__``, ``__post_init__``,
  ...) are not part of the rendered API (``filters: public`` would show them).

A reference to a name of this package that does not exist is reported as a
warning with the file and line (``mkdocs build --strict`` fails on it).
"""
from __future__ import annotations

import re
from typing import Any

import griffe

PACKAGE = "torch_geometric_lrp"
_logger = griffe.logger

_ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|obj|exc|const):`(~?)\.?([^`<>]+?)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_MATH_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*\n(?:[ \t]*\n)?(?P<body>(?:(?P=indent)[ \t]+\S.*\n?|[ \t]*\n)+)",
                         re.MULTILINE)
_EXAMPLE_HEADING = re.compile(r"^(?P<indent>[ \t]*)Example\n(?P=indent)-{7,}[ \t]*$", re.MULTILINE)


def _resolve(name: str, obj: griffe.Object) -> str | None:
    """The full path of ``name`` seen from ``obj``, or ``None`` if it is not ours."""
    root = obj.package
    if name == PACKAGE or name.startswith(PACKAGE + "."):
        try:
            root[name[len(PACKAGE) + 1:]] if name != PACKAGE else root
        except (KeyError, griffe.AliasResolutionError):
            return None
        return name
    # a short name: the enclosing scopes from the innermost out
    scope: griffe.Object | None = obj if obj.is_class or obj.is_module else obj.parent
    head = name.split(".")[0]
    while scope is not None:
        if head in scope.members:
            try:
                scope[name]
            except (KeyError, griffe.AliasResolutionError):
                return None
            return f"{scope.path}.{name}"
        scope = scope.parent
    return None


def _rewrite(text: str, obj: griffe.Object) -> str:
    lineno = obj.docstring.lineno if obj.docstring else obj.lineno

    def role(match: re.Match) -> str:
        kind, short, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if short else name
        if kind in ("func", "meth"):
            shown += "()"
        if name.startswith(("torch.", "torch_geometric.")) or name in ("torch", "torch_geometric"):
            return f"`{shown}`"  # another project's object: no inventory offline
        path = _resolve(name, obj)
        if path is not None and kind in ("func", "meth"):
            # ``lrp.convert`` is a function re-exported over the module of the
            # same name, which griffe resolves first: link the function.
            target = obj.package[path[len(PACKAGE) + 1:]] if path != PACKAGE else obj.package
            last = path.rsplit(".", 1)[-1]
            if target.is_module and last in target.members and target.members[last].is_function:
                path = f"{path}.{last}"
        if path is None:
            _logger.warning(
                "%s:%s: %s: unresolved reference %s in the docstring of %s",
                obj.relative_filepath, lineno, kind, match.group(0), obj.path,
            )
            return f"`{shown}`"
        return f"[`{shown}`][{path}]"

    def math_block(match: re.Match) -> str:
        indent = match.group("indent")
        body = [line.strip() for line in match.group("body").splitlines() if line.strip()]
        return f"{indent}$$\n" + "".join(f"{indent}{line}\n" for line in body) + f"{indent}$$\n\n"

    text = _EXAMPLE_HEADING.sub(lambda m: f"{m.group('indent')}Examples\n{m.group('indent')}--------", text)
    text = _MATH_BLOCK.sub(math_block, text)
    text = _MATH_ROLE.sub(lambda m: f"${m.group(1)}$", text)
    return _ROLE.sub(role, text)


def _doc_comment(obj: griffe.Object) -> griffe.Docstring | None:
    """The ``#:`` comment lines right above an attribute's assignment."""
    try:
        lines = obj.lines_collection[obj.filepath]
    except (KeyError, TypeError):
        return None
    if not obj.lineno:
        return None
    found: list[str] = []
    index = obj.lineno - 2  # the line above, 0-based
    while index >= 0 and lines[index].strip().startswith("#:"):
        found.insert(0, lines[index].strip()[2:].strip())
        index -= 1
    if not found:
        return None
    return griffe.Docstring("\n".join(found), lineno=index + 2, endlineno=obj.lineno - 1, parent=obj)


class SphinxMarkup(griffe.Extension):
    """Rewrite Sphinx roles and math in every docstring of the loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()

        def walk(obj: griffe.Object) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if obj.parent is not None and obj.parent.is_class and obj.name.startswith("__") \
                    and obj.name.endswith("__") and obj.name not in ("__init__", "__call__"):
                obj.public = False
            if obj.docstring is None and obj.is_attribute:
                obj.docstring = _doc_comment(obj)
            if obj.docstring is not None:
                obj.docstring.value = _rewrite(obj.docstring.value, obj)
            for member in obj.members.values():
                if not member.is_alias:
                    walk(member)

        walk(pkg)
