"""The package's import statements, read from its source with ``ast`` (nothing is imported): the layering
test (tests/test_layering.py) and the import-cycle test (tests/test_architecture.py) walk the same edges;
the layering test also reads which underscore names one module takes from another (``private_imports``)."""
from __future__ import annotations

import ast
from pathlib import Path

import seq2seq_zoo

PKG = Path(seq2seq_zoo.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in PKG.rglob("*.py")}


def _reexports(package: str) -> dict[str, str]:
    """name -> the submodule a package's __init__ takes it from (``from seq2seq_zoo.config.schema import X``)."""
    out = {}
    for node in ast.parse(FILES[package].read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(package + "."):
            for a in node.names:
                out[a.asname or a.name] = node.module
    return out


def _from_module(mod: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from X import ...`` statement names, relative ones resolved against ``mod``."""
    if not node.level:
        return node.module or ""
    base = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(mod: str, path: Path, node, resolve: bool) -> set[str]:
    """The package modules one import statement loads. With ``resolve``, a name a package re-exports
    resolves to the submodule that defines it, so ``from seq2seq_zoo.config import RunSpec`` depends on
    config.spec; without it, on the package (whose __init__ runs first: the edge a cycle can pass through)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in FILES}
    target = _from_module(mod, path, node)
    out = set()
    for a in node.names:
        if f"{target}.{a.name}" in FILES:
            out.add(f"{target}.{a.name}")
        elif target in FILES:
            package = FILES[target].name == "__init__.py"
            out.add(_reexports(target).get(a.name, target) if resolve and package else target)
    return out


def import_edges(resolve: bool = True) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(module-level edges, edges made inside a function), as (importer, imported) pairs."""
    top, lazy = set(), set()

    def visit(mod, path, nodes, inside):
        for n in nodes:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                (lazy if inside else top).update((mod, t) for t in _targets(mod, path, n, resolve) if t != mod)
            for child in ast.iter_child_nodes(n):
                fn = isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(mod, path, [child], inside or fn)

    for mod, path in FILES.items():
        visit(mod, path, ast.parse(path.read_text(encoding="utf-8")).body, False)
    return top, lazy


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports() -> set[tuple[str, str]]:
    """(importer, ``module._name``) for each name with a leading underscore (a dunder aside) that a module
    of the package takes from another one: ``from seq2seq_zoo.m import _name`` (relative forms too, and
    inside functions), or ``m._name`` where ``m`` is a package module the importer imported."""
    out = set()
    for mod, path in FILES.items():
        out |= private_uses(mod, path, ast.parse(path.read_text(encoding="utf-8")))
    return out


def private_uses(mod: str, path: Path, tree: ast.Module) -> set[tuple[str, str]]:
    """``private_imports`` of one module ``mod`` at ``path``, whose parsed source is ``tree``."""
    out, modules = set(), {}   # modules: a local name bound to a package module -> that module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _from_module(mod, path, node)
            for a in node.names:
                if f"{target}.{a.name}" in FILES:
                    modules[a.asname or a.name] = f"{target}.{a.name}"
                elif target in FILES and target != mod and _private(a.name):
                    out.add((mod, f"{target}.{a.name}"))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in FILES:   # `import a.b.c` binds a; `import a.b.c as m` binds m to a.b.c
                    top = a.name.split(".")[0]
                    modules[a.asname or top] = a.name if a.asname else top
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, v = [], node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id in modules:
                target = ".".join([modules[v.id], *reversed(chain)])
                if target in FILES and target != mod:
                    out.add((mod, f"{target}.{node.attr}"))
    return out
