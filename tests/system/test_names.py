"""One name per idea: a public type name means one thing in the whole product.

Read from the source with `ast`: every class defined at the top of a module in `gateway/`, `policies/`
and `adapters/`, and every module-level alias of a type (a CapWords name assigned at the top of a
module, such as ``Endpoint = Callable[[Request], Awaitable[Response]]``), unless it starts with
``_``. Two modules that define the same name make a reader, an import or a traceback guess which
one is meant.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gateway", "policies", "adapters")


def _is_type_name(name: str) -> bool:
    """CapWords, as a class or a type alias is named (constants are UPPER_CASE, functions lower_case)."""
    return name[:1].isupper() and any(char.islower() for char in name)


def _public_type_names(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if _is_type_name(node.targets[0].id):
                names.append(node.targets[0].id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_type_name(node.target.id):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def defined_names() -> dict[str, list[str]]:
    """Each public type name, with the modules (as paths) that define it."""
    places: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for name in _public_type_names(ast.parse(path.read_text())):
                places[name].append(str(path.relative_to(ROOT)))
    return places


def repeats(places: dict[str, list[str]]) -> list[str]:
    """Each name defined in more than one module, with every place that defines it."""
    return [f"{name}: {' and '.join(where)}" for name, where in sorted(places.items()) if len(where) > 1]


def test_no_public_type_name_is_defined_twice() -> None:
    """Every public class and type alias of the product is defined in exactly one module."""
    assert repeats(defined_names()) == []


def test_a_class_and_an_alias_of_one_name_are_reported_with_both_places() -> None:
    """The check is not vacuous: a class and an alias named alike are both found, and the report names
    both modules; private names and constants are not type names."""
    assert _public_type_names(ast.parse("class Decision:\n    pass\n")) == ["Decision"]
    assert _public_type_names(ast.parse("Decision = dict[str, str]\n_Private = int\nLIMIT = 3\n")) == ["Decision"]
    places = {"Decision": ["gateway/decision.py", "gateway/admin/bodies.py"], "Principal": ["gateway/principal.py"]}
    assert repeats(places) == ["Decision: gateway/decision.py and gateway/admin/bodies.py"]


OUTSIDE_THE_TREE = {"gateway.signing.receipts": {"ReceiptMismatchError"}}
"""Exception classes defined elsewhere on purpose (the errors module's docstring says why)."""


def _exception_classes(module: str) -> list[str]:
    """The exception classes `module` defines (imported, so a base class decides, not a name)."""
    loaded = importlib.import_module(module)
    return sorted(
        name
        for name, value in vars(loaded).items()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module
    )


def test_every_exception_class_sits_in_the_one_error_tree() -> None:
    """An exception of the product is defined in `gateway/errors.py`, where the tree is drawn, so a caller
    finds every error it may catch in one place."""
    stray = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if module in ("gateway.errors", "gateway.__main__"):
                continue
            found = set(_exception_classes(module)) - OUTSIDE_THE_TREE.get(module, set())
            if found:
                stray[module] = sorted(found)
    assert stray == {}


def test_an_exception_class_outside_the_tree_is_found() -> None:
    """The check is not vacuous: the exception classes a module defines are found, and nothing else."""
    assert _exception_classes("gateway.errors")[:3] == ["ArchiveError", "AuditArchiveError", "AuthError"]
    assert _exception_classes("gateway.signing.receipts") == ["ReceiptMismatchError"]
    assert _exception_classes("gateway.registry.views") == []
