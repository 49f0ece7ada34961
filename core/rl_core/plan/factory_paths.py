"""Check a rollout / train card's factory path without importing the engine it names (vLLM, Megatron, ... are slow
to import and may need a GPU): find the module (``importlib.util.find_spec``) and read its source with ``ast`` (nothing
runs) for the top-level name; a module that can bind names the source does not show is not judged.
"""

from __future__ import annotations

import ast
import importlib.util
from typing import Any

from rl_core.problems import Problem


def _bound_names(tree: ast.Module) -> tuple[set[str], bool]:
    """Names bound at the module's top level (inside top-level ``if`` / ``try`` / ``with`` too), and whether the
    module may bind others the source does not show."""
    names: set[str] = set()
    opaque = False

    def targets(node: ast.AST) -> None:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List)):
            for elt in node.elts:
                targets(elt)
        elif isinstance(node, ast.Starred):
            targets(node.value)

    def walk(body: list[ast.stmt]) -> None:
        nonlocal opaque
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
                opaque |= node.name == "__getattr__"
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    targets(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        opaque = True
                    else:
                        names.add(alias.asname or alias.name.split(".")[0])
            elif isinstance(node, ast.If):
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                walk(node.body)
                for handler in node.handlers:
                    walk(handler.body)
                walk(node.orelse)
                walk(node.finalbody)
            elif isinstance(node, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                walk(node.body)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.NamedExpr):
                targets(node.value.target)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                # globals().update(...) / setattr(sys.modules[...], ...): the module binds names at run time
                func = node.value.func
                if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and getattr(func.value.func, "id", "") in ("globals", "vars"):
                    opaque = True

    walk(tree.body)
    return names, opaque


def module_binds(module: str, name: str) -> bool | None:
    """Whether ``module``'s source binds ``name`` at top level; None when it cannot be told without importing."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        with open(spec.origin, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=spec.origin)
    except (OSError, SyntaxError, ValueError):
        return None  # a module that does not parse fails at import, with Python's own message
    names, opaque = _bound_names(tree)
    if name in names:
        return True
    if spec.submodule_search_locations is not None:  # a package: its submodule of that name
        try:
            if importlib.util.find_spec(f"{module}.{name}") is not None:
                return True
        except (ImportError, ValueError):
            pass
    return None if opaque else False


def factory_path_problem(card: Any, key: str) -> Problem | None:
    """A problem when a rollout / train card's factory module is not installed, or does not define the factory."""
    ref = card.factory if card is not None else None
    if not isinstance(ref, str):
        return None
    module, _, attr = ref.partition(":")
    who = f"{card.kind} backend {card.name!r} from {card.provider or 'an unregistered card'}"
    dist = card.provider.distribution if card.provider else "the plugin"
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing
        found = False
    if not found:
        return Problem(key=key, what=f"{who} names a factory module {module!r} that is not installed ({ref!r})",
                       fix=f"reinstall {dist}, or report the card's factory path to its authors")
    top = attr.split(".")[0]
    if top and module_binds(module, top) is False:
        return Problem(key=key, what=f"{who} names a factory {ref!r}, but module {module!r} defines no {top!r}",
                       fix=f"fix the card's factory path (report it to the authors of {dist}), or set {key} to another {card.kind} backend")
    return None
