#!/usr/bin/env python3
"""Check built wheels: one py3-none wheel per platform, holding the package and its library,
with apache-tvm-ffi as the only required dependency, and nothing that must not ship.

    python3 tools/check_wheel.py dist/*.whl
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path


def check(wheel: Path) -> list[str]:
    problems = []
    match = re.fullmatch(r"(?P<dist>[A-Za-z0-9_]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl", wheel.name)
    if not match:
        return [f"{wheel.name}: not a wheel file name"]
    package = match["dist"].lower()
    python_tag, abi_tag, platform = match["tags"].split("-", 2)
    if (python_tag, abi_tag) != ("py3", "none"):
        problems.append(f"tag {python_tag}-{abi_tag}: expected py3-none (one wheel for every Python 3)")
    if not re.match(r"(linux|manylinux|musllinux)", platform):
        problems.append(f"platform tag {platform}: expected a Linux platform")

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        for required in (f"{package}/__init__.py", f"{package}/py.typed", f"{package}/lib{package}.so"):
            if required not in names:
                problems.append(f"missing {required}")
        for name in names:
            if "__pycache__" in name or name.endswith(".pyc"):
                problems.append(f"bytecode shipped: {name}")
            if Path(name).name.startswith("libtvm_ffi"):
                problems.append(f"{name}: libtvm_ffi comes from the apache-tvm-ffi wheel, never vendored")
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(zf.read(metadata_name).decode())
        required = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
        if [re.split(r"[<>=!~ ;]", r, maxsplit=1)[0] for r in required] != ["apache-tvm-ffi"]:
            problems.append(f"required dependencies {required}: expected apache-tvm-ffi alone")

        with tempfile.TemporaryDirectory() as tmp:
            library = Path(zf.extract(f"{package}/lib{package}.so", tmp))
            if shutil.which("readelf"):
                dynamic = subprocess.run(
                    ["readelf", "-d", str(library)], capture_output=True, text=True
                ).stdout
                needed = re.findall(r"\(NEEDED\).*\[(.+)\]", dynamic)
                for lib in needed:
                    if lib.startswith(("libcudart", "libpython")):
                        problems.append(
                            f"lib{package}.so needs {lib}: cudart must be static, libpython absent"
                        )
    size_mb = wheel.stat().st_size / 2**20
    print(f"{wheel.name}: {size_mb:.1f} MiB, {len(names)} files, " + ("ok" if not problems else "PROBLEMS"))
    return problems


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    problems = [f"{Path(p).name}: {issue}" for p in paths for issue in check(Path(p))]
    for problem in problems:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
