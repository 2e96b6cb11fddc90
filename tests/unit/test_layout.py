"""The package layout keeps the habits the release-layer review asked for (issue 14).

Read from the source with ``ast`` (every ``from … import`` inside the package, at module level or
inside a function): no module imports another module's private (``_name``) attribute, and the
import graph between modules has no cycle. Private *modules* (``._validate``, ``._fixed``) are the
package's shared internals and may be imported.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import opendp_sketch

ROOT = Path(opendp_sketch.__file__).resolve().parent
PACKAGE = ROOT.name


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports() -> tuple[dict[str, set[str]], list[str]]:
    """Module → the package modules it imports, and every private name imported across modules."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    private = []
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == PACKAGE:
                target = str(node.module)
            else:
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                imported = full if full in modules else target
                if imported in modules and imported != name:
                    graph[name].add(imported)
                if full not in modules and alias.name.startswith("_") and not alias.name.startswith("__"):
                    private.append(f"{name} imports {alias.name} from {target}")
    return graph, private


def test_no_private_name_is_imported_across_modules():
    _, private = _imports()
    assert private == []


def test_the_import_graph_has_no_cycle():
    graph, _ = _imports()
    # a package's __init__ re-exports its modules: edges into it would close every cycle trivially
    packages = {name for name, path in _modules().items() if path.name == "__init__.py"}
    acyclic = {name: {t for t in targets if t not in packages} for name, targets in graph.items()}
    graphlib.TopologicalSorter(acyclic).prepare()  # raises CycleError naming the cycle


def test_the_checks_see_the_release_layer():
    graph, _ = _imports()
    assert f"{PACKAGE}.measurements" in graph[f"{PACKAGE}.context"]
    assert f"{PACKAGE}.measurements" in graph[f"{PACKAGE}.release"]
    # backends never import the release layer, and estimators never import the noise step
    for name, targets in graph.items():
        if name.startswith((f"{PACKAGE}.backends", f"{PACKAGE}.estimators")):
            assert not targets & {f"{PACKAGE}.release", f"{PACKAGE}.measurements", f"{PACKAGE}.adaptive"}, (
                name
            )


def test_no_string_names_a_backend_in_the_release_path():
    """The release path dispatches through the backend registry, never on a backend's name."""
    for module in ("release", "measurements", "adaptive", "context", "session"):
        text = (ROOT / f"{module}.py").read_text(encoding="utf-8")
        for name in ('"spark"', '"dask"', "'spark'", "'dask'", "isinstance(desc, SparkTableDomain)"):
            assert name not in text, (module, name)
