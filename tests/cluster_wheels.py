"""The cluster lock's wheels, unpacked, for tests that read upstream source without importing it.

`make cluster-wheels` (part of `make tools`) downloads the wheels of ray, vllm and skyrl at the versions and
hashes of cluster/requirements.lock (linux x86_64, CPython 3.12) into WHEEL_CACHE and unpacks them there by
running this file; tests only read that cache and never download. Stdlib only: the Makefile runs it with
the machine's Python before the project's virtual environment matters.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_LOCK = ROOT / "cluster" / "requirements.lock"
WHEEL_CACHE = ROOT / ".venv-uv" / "cluster-wheels"

# A pinned line of a compiled requirements file: `name==version` (hash lines and comments follow).
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def normalize(name: str) -> str:
    """Return a distribution name in its canonical form (PEP 503: lower case, runs of -_. as one -)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock: Path = CLUSTER_LOCK) -> dict[str, list[str]]:
    """Return every version pinned in a compiled requirements file, by canonical distribution name."""
    versions: dict[str, list[str]] = {}
    for line in lock.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            versions.setdefault(normalize(match.group(1)), []).append(match.group(2))
    return versions


def locked_version(name: str, lock: Path = CLUSTER_LOCK) -> str:
    """Return the one version of `name` pinned in the cluster lock (KeyError/ValueError if none or several)."""
    found = locked_versions(lock)[normalize(name)]
    if len(found) != 1:
        raise ValueError(f"{name} is pinned {len(found)} times in {lock}: {found}")
    return found[0]


def wheel_file(name: str, version: str, cache: Path = WHEEL_CACHE) -> Path:
    """Return the downloaded wheel of `name`==`version` in `cache`."""
    wanted = (normalize(name), version)
    found = [
        path
        for path in sorted(cache.glob("*.whl"))
        if (normalize(path.name.split("-")[0]), path.name.split("-")[1]) == wanted
    ]
    if len(found) != 1:
        raise FileNotFoundError(
            f"expected one wheel of {name}=={version} in {cache}, found {[p.name for p in found]}: "
            "run `make cluster-wheels` (part of `make tools`)"
        )
    return found[0]


def unpack(wheel: Path) -> Path:
    """Unpack `wheel` beside itself, once, and return the directory (safe when several processes race)."""
    target = wheel.with_suffix("")
    if target.is_dir():
        return target
    scratch = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=wheel.parent))
    scratch.chmod(0o755)  # mkdtemp makes it private; the unpacked tree is plain readable source
    try:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(scratch)
        os.rename(scratch, target)  # atomic: a reader sees the whole tree or none
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def unpacked_wheel(name: str, cache: Path = WHEEL_CACHE, lock: Path = CLUSTER_LOCK) -> Path:
    """Return the unpacked linux x86_64 / py3.12 wheel of `name` at its cluster-lock version.

    The directory holds the wheel's top-level packages (e.g. `vllm/`) and its `.dist-info`.
    """
    return unpack(wheel_file(name, locked_version(name, lock), cache))


def main(argv: list[str]) -> int:
    """Unpack every wheel in the given cache directory (default WHEEL_CACHE)."""
    cache = Path(argv[0]) if argv else WHEEL_CACHE
    for wheel in sorted(cache.glob("*.whl")):
        print(f"unpacked {unpack(wheel)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
