"""A Lambda function's code zip loaded as Python modules, each code digest with its own copies of them."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import re
import shutil
import sys
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

_HANDLER_PATTERN = re.compile(r"^[A-Za-z_][\w/.]*\.[A-Za-z_]\w*$")

Handler = Callable[[Any, Any], Any]


class FunctionError(Exception):
    """A runtime-level failure reported with a fixed AWS error type (``Runtime.*``)."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


@dataclass(frozen=True)
class UnpackedCode:
    """A code zip unpacked on disk."""

    directory: Path
    digest: str  # sha256 of the zip


class LambdaCodeLoader:
    """Unpacks code zips into a cache directory and imports their handlers.

    A handler module is loaded by file under a name unique to its function and code digest, so
    module-level state lives as long as this loader, per function (a warm execution environment).
    The code's own top-level packages (``mazeops``, say) are imported normally, but only inside
    `importable`, which gives each digest its own copies of them.
    """

    def __init__(self, cache_dir: Path):
        """cache_dir: where code zips are unpacked, one directory per digest."""
        self.cache_dir = Path(cache_dir)
        self._handlers: dict[tuple[str, str, str], Handler] = {}
        self._modules_by_digest: dict[str, dict[str, ModuleType]] = {}

    def unpack(self, code_zip: bytes) -> UnpackedCode:
        """Unzip `code_zip` once per digest (safe against another process unpacking the same one)."""
        digest = hashlib.sha256(code_zip).hexdigest()
        code_dir = self.cache_dir / digest[:16]
        if code_dir.is_dir():
            return UnpackedCode(code_dir, digest)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        staging = self.cache_dir / f".{digest[:16]}.{uuid.uuid4().hex}"
        try:
            with zipfile.ZipFile(io.BytesIO(code_zip)) as archive:
                archive.extractall(staging)
        except zipfile.BadZipFile as exc:
            raise FunctionError("Runtime.ImportModuleError", f"Could not unzip the function's code: {exc}") from exc
        try:
            staging.rename(code_dir)
        except OSError:  # another process unpacked the same digest first
            shutil.rmtree(staging, ignore_errors=True)
            if not code_dir.is_dir():
                raise
        return UnpackedCode(code_dir, digest)

    @contextlib.contextmanager
    def importable(self, code: UnpackedCode) -> Iterator[None]:
        """Make the code directory's top-level modules, this digest's copies only, importable for the block.

        Afterwards the host process's modules of those names are back. Third-party packages come
        from this process's environment, as from a Lambda layer.
        """
        own_modules = self._modules_by_digest.setdefault(code.digest, {})
        top_level = _top_level_names(code.directory)

        def provided_here(name: str) -> bool:
            return name.partition(".")[0] in top_level

        # Snapshots (dict.copy is one C call), never sys.modules itself: other threads import meanwhile, and a dict
        # that grows under a Python-level loop raises "dictionary changed size during iteration".
        host_modules = {name: module for name, module in sys.modules.copy().items() if provided_here(name)}
        for name in host_modules:
            del sys.modules[name]
        sys.modules.update(own_modules)
        # A new list, not an insert into the host's: another thread may be iterating the host's list in an
        # import (the path finder walks sys.path), and a list that shifts under it can skip site-packages.
        host_path = sys.path
        sys.path = [str(code.directory), *host_path]
        try:
            yield
        finally:
            sys.path = host_path
            for name in [name for name in sys.modules.copy() if provided_here(name)]:
                own_modules[name] = sys.modules.pop(name)
            sys.modules.update(host_modules)

    def handler(self, code: UnpackedCode, function_name: str, handler: str) -> Handler:
        """The callable `handler` (``module.function``) names, imported once per function and digest.

        Call inside `importable(code)`; raises FunctionError (``Runtime.MalformedHandlerName``,
        ``Runtime.ImportModuleError``, ``Runtime.HandlerNotFound``) as the AWS runtime reports them.
        """
        key = (function_name, code.digest, handler)
        if key in self._handlers:
            return self._handlers[key]
        if not _HANDLER_PATTERN.match(handler or ""):
            raise FunctionError("Runtime.MalformedHandlerName", f"Bad handler '{handler}': expected module.function")
        module_path, attribute = handler.rsplit(".", 1)
        module_parts = re.split(r"[./]", module_path)
        source = code.directory.joinpath(*module_parts).with_suffix(".py")
        if not source.is_file():
            raise FunctionError(
                "Runtime.ImportModuleError", f"Unable to import module '{module_path}': No module named '{module_path}'"
            )
        unique_name = "_lambda_{}_{}_{}".format(
            code.digest[:12], re.sub(r"\W", "_", function_name), "_".join(module_parts)
        )
        module = _load_module(unique_name, source, package=".".join(module_parts[:-1]))
        function = getattr(module, attribute, None)
        if not callable(function):
            raise FunctionError("Runtime.HandlerNotFound", f"Handler '{attribute}' missing on module '{module_path}'")
        self._handlers[key] = function
        return function


def _top_level_names(code_dir: Path) -> set[str]:
    """Module and package names a code directory provides at its top level."""
    names = {path.stem for path in code_dir.glob("*.py")}
    names |= {path.name for path in code_dir.iterdir() if path.is_dir() and path.name.isidentifier()}
    return names


def _load_module(unique_name: str, source: Path, package: str) -> ModuleType:
    """Import `source` as module `unique_name`, with `package` for its relative imports."""
    module_spec = importlib.util.spec_from_file_location(unique_name, source)
    module = importlib.util.module_from_spec(module_spec)
    module.__package__ = package
    sys.modules[unique_name] = module
    try:
        module_spec.loader.exec_module(module)
    except ImportError as exc:
        del sys.modules[unique_name]
        raise FunctionError("Runtime.ImportModuleError", f"Unable to import module '{source.stem}': {exc}") from exc
    except BaseException:
        del sys.modules[unique_name]
        raise
    return module
