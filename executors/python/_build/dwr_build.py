"""An in-tree PEP 517 build backend for the dwr package: it writes the wheel
(and the sdist) with the standard library alone, so that
``pip install ./executors/python`` needs nothing from a package index — not
even setuptools or wheel — and works offline."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile
from typing import Dict, List, Optional, Tuple

NAME = "dwr"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"

METADATA = """Metadata-Version: 2.1
Name: {name}
Version: {version}
Summary: Executor SDK and client of dwr, the durable work runtime
Requires-Python: >=3.10
Requires-Dist: cryptography>=41
""".format(name=NAME, version=VERSION)


def _package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path on disk) of the package's files."""
    out = []
    pkg = os.path.join(ROOT, NAME)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py") or f == "py.typed":
                disk = os.path.join(dirpath, f)
                out.append((os.path.relpath(disk, ROOT).replace(os.sep, "/"), disk))
    return out


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def _dist_info() -> Dict[str, bytes]:
    d = "%s-%s.dist-info" % (NAME, VERSION)
    return {d + "/METADATA": METADATA.encode(),
            d + "/WHEEL": ("Wheel-Version: 1.0\nGenerator: dwr_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG).encode(),
            d + "/top_level.txt": (NAME + "\n").encode()}


def _write_wheel(wheel_directory: str, files: Dict[str, bytes]) -> str:
    name = "%s-%s-%s.whl" % (NAME, VERSION, TAG)
    record_path = "%s-%s.dist-info/RECORD" % (NAME, VERSION)
    records = [_record_line(p, b) for p, b in files.items()] + [record_path + ",,"]
    files = dict(files)
    files[record_path] = ("\n".join(records) + "\n").encode()
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for p, b in files.items():
            z.writestr(zipfile.ZipInfo(p, date_time=(2020, 1, 1, 0, 0, 0)), b)
    return name


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    files: Dict[str, bytes] = {}
    for path, disk in _package_files():
        with open(disk, "rb") as f:
            files[path] = f.read()
    files.update(_dist_info())
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """An editable install: a .pth file naming the source directory."""
    files = {NAME + "_editable.pth": (ROOT + "\n").encode()}
    files.update(_dist_info())
    return _write_wheel(wheel_directory, files)


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    base = "%s-%s" % (NAME, VERSION)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        paths = [("pyproject.toml", os.path.join(ROOT, "pyproject.toml")),
                 ("_build/dwr_build.py", os.path.abspath(__file__))] + _package_files()
        for path, disk in paths:
            t.add(disk, arcname=base + "/" + path)
        pkg_info = METADATA.encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return name
