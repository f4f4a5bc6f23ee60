"""Static import checks across package source trees: does code written against one package's API find
every module and name it imports in another package's source? Reads source with `ast`; imports nothing.

`imports_of(tree, "vllm")` lists every absolute `import vllm...` / `from vllm... import name` in a tree
(lazy imports inside functions included); `SourceTree(root).unresolved(refs)` returns those that the
package under `root` lacks. A name resolves when the module binds it at module level (definitions,
assignments, imports, in any `if`/`try` branch), when it is a submodule, through `from x import *`
re-exports (followed STAR_DEPTH levels: the star module's `__all__`, else its public bindings), or, in a
module with a module-level `__getattr__` (PEP 562 lazy attributes), when the module names it in a string.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# How many levels of `from x import *` re-exports a name lookup follows.
STAR_DEPTH = 2


@dataclass(frozen=True)
class ImportRef:
    """One imported module, or one name imported from a module, at a place in the importing source."""

    path: str
    line: int
    module: str
    name: str | None = None

    def __str__(self) -> str:
        what = f"from {self.module} import {self.name}" if self.name else f"import {self.module}"
        return f"{self.path}:{self.line}: {what}"


def _module_files(root: Path) -> Iterator[Path]:
    yield from sorted(root.rglob("*.py"))


def imports_of(tree: Path, package: str, base: Path | None = None) -> list[ImportRef]:
    """Return every absolute import of `package` (or its submodules) in the .py files under `tree`.

    Paths in the result are relative to `base` (default: `tree`).
    """
    refs: list[ImportRef] = []
    for path in _module_files(tree):
        shown = str(path.relative_to(base or tree))
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Import):
                refs += [
                    ImportRef(shown, node.lineno, alias.name)
                    for alias in node.names
                    if alias.name.split(".")[0] == package
                ]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] != package:
                    continue
                if any(alias.name == "*" for alias in node.names):
                    refs.append(ImportRef(shown, node.lineno, node.module))
                refs += [ImportRef(shown, node.lineno, node.module, a.name) for a in node.names if a.name != "*"]
    return refs


@dataclass(frozen=True)
class _Bindings:
    """What a module binds at module level, statically."""

    names: frozenset[str]
    stars: tuple[str, ...]  # absolute names of modules re-exported with `from x import *`
    all_names: frozenset[str] | None  # a literal `__all__`, when there is one
    lazy: bool  # defines a module-level `__getattr__`
    strings: frozenset[str]  # every string constant in the module


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Yield module-level statements, descending into if/try/with/loop blocks but not defs or classes."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.Try | ast.TryStar):
            for block in ("body", "orelse", "finalbody"):
                yield from _module_level(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _module_level(handler.body)


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)


def _literal_all(node: ast.stmt) -> frozenset[str] | None:
    if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return frozenset(str(item) for item in value)
    return None


class SourceTree:
    """The modules of the packages under `root` (an unpacked wheel, or site-packages), read as source."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._bindings = cache(self._read_bindings)

    def module_path(self, module: str) -> Path | None:
        """Return the file (or namespace directory) that makes `module` importable, or None."""
        base = self.root.joinpath(*module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        native = sorted(base.parent.glob(f"{base.name}.*so")) if base.parent.is_dir() else []
        if native:
            return native[0]  # an extension module: its names cannot be read
        return base if base.is_dir() else None  # a namespace package (PEP 420)

    def has_module(self, module: str) -> bool:
        """Whether `module` exists in the tree."""
        return self.module_path(module) is not None

    def _read_bindings(self, module: str) -> _Bindings | None:
        path = self.module_path(module)
        if path is None or path.suffix != ".py":
            return None  # missing, native or a namespace directory: nothing to read
        tree = ast.parse(path.read_bytes(), filename=str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names: set[str] = set()
        stars: list[str] = []
        all_names: frozenset[str] | None = None
        for node in _module_level(tree.body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    names.update(_target_names(target))
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                names.update(_target_names(node.target))
            elif isinstance(node, ast.Import):
                names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, package)
                for alias in node.names:
                    if alias.name == "*":
                        stars.append(source)
                    else:
                        names.add(alias.asname or alias.name)
            all_names = _literal_all(node) or all_names
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        return _Bindings(frozenset(names), tuple(stars), all_names, "__getattr__" in names, frozenset(strings))

    def defines(self, module: str, name: str, depth: int = STAR_DEPTH) -> bool:
        """Whether `from module import name` finds `name` (see the module docstring for the rules)."""
        if self.has_module(f"{module}.{name}"):
            return True
        bindings = self._bindings(module)
        if bindings is None:
            path = self.module_path(module)  # a native module's names are unknowable: assume present
            return path is not None and path.is_file()
        if name in bindings.names or (bindings.lazy and name in bindings.strings):
            return True
        return depth > 0 and any(self._exports(star, name, depth - 1) for star in bindings.stars)

    def _exports(self, module: str, name: str, depth: int) -> bool:
        """Whether `from module import *` binds `name`."""
        bindings = self._bindings(module)
        if bindings is not None and bindings.all_names is not None:
            return name in bindings.all_names
        return not name.startswith("_") and self.defines(module, name, depth)

    def unresolved(self, refs: list[ImportRef]) -> list[ImportRef]:
        """Return the imports that this tree cannot satisfy."""
        return [
            ref
            for ref in refs
            if not self.has_module(ref.module) or (ref.name is not None and not self.defines(ref.module, ref.name))
        ]


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """Return the absolute module name of a (possibly relative) `from ... import`."""
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))
