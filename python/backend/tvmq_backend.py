"""The build backend of the tvmq package (PEP 517 and PEP 660), in the tree.

The package is pure Python (ctypes over libtvm.so), so building it is only
zipping files: this backend does that with the standard library, and needs
nothing from the network. ``pip install ./python`` therefore works offline,
where a backend such as setuptools would have to be downloaded into pip's
isolated build environment first.

The metadata comes from ``pyproject.toml``'s ``[project]`` table (its plain
``key = "value"`` lines and the ``classifiers`` list).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tvmq"


def _project() -> Tuple[Dict[str, str], List[str]]:
    """The ``[project]`` table's string values and its classifiers."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not table:
        raise RuntimeError("pyproject.toml has no [project] table")
    body = table.group(1)
    values = dict(re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"\s*$', body, re.M))
    license_ = re.search(r'^license\s*=\s*\{\s*text\s*=\s*"([^"]*)"', body, re.M)
    if license_:
        values["license"] = license_.group(1)
    listed = re.search(r"^classifiers\s*=\s*\[(.*?)\]", body, re.M | re.S)
    classifiers = re.findall(r'"([^"]*)"', listed.group(1)) if listed else []
    for key in ("name", "version"):
        if key not in values:
            raise RuntimeError(f'pyproject.toml: [project] has no {key} = "..."')
    return values, classifiers


def _metadata() -> str:
    values, classifiers = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {values['name']}",
        f"Version: {values['version']}",
    ]
    if "description" in values:
        lines.append(f"Summary: {values['description']}")
    if "requires-python" in values:
        lines.append(f"Requires-Python: {values['requires-python']}")
    if "license" in values:
        lines.append(f"License: {values['license']}")
    lines += [f"Classifier: {c}" for c in classifiers]
    readme = ROOT / values.get("readme", "README.md")
    if readme.is_file():
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme.read_text(encoding="utf-8")
    return "\n".join(lines) + "\n"


def _names() -> Tuple[str, str]:
    values, _ = _project()
    return values["name"], values["version"]


def _package_files() -> List[Path]:
    """The package's files: its Python sources, py.typed, and any libtvm.so
    copied into it (found before the system's at run time)."""
    src = ROOT / PACKAGE
    files = [p for p in sorted(src.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    return [p for p in files if p.suffix in (".py", ".typed") or p.name.startswith("libtvm.so")]


def _hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _wheel(directory: str, contents: List[Tuple[str, bytes]]) -> str:
    """Writes a wheel of ``contents`` (archive name, bytes) plus its
    dist-info; returns its file name."""
    name, version = _names()
    dist_info = f"{name}-{version}.dist-info"
    wheel_meta = "Wheel-Version: 1.0\nGenerator: tvmq_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    contents = contents + [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (f"{dist_info}/WHEEL", wheel_meta.encode()),
    ]
    record = "".join(f"{arc},{_hash(data)},{len(data)}\n" for arc, data in contents)
    record += f"{dist_info}/RECORD,,\n"
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in contents + [(f"{dist_info}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if ".so" in arc else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return filename


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(
    wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None
) -> str:
    files = [(p.relative_to(ROOT).as_posix(), p.read_bytes()) for p in _package_files()]
    return _wheel(wheel_directory, files)


def build_editable(
    wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None
) -> str:
    """A wheel whose .pth file puts this source tree on the path."""
    name, _ = _names()
    return _wheel(wheel_directory, [(f"__editable__.{name}.pth", (str(ROOT) + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    name, version = _names()
    base = f"{name}-{version}"
    files = [ROOT / "pyproject.toml", ROOT / "README.md", Path(__file__).resolve()] + _package_files()
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:

        def add(arc: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{base}/{arc}")
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(data))

        for p in files:
            if p.is_file():
                add(p.relative_to(ROOT).as_posix(), p.read_bytes())
        add("PKG-INFO", _metadata().encode())
    return filename
