#!/usr/bin/env python3
"""Merge the libraries of wheels built from one commit into one wheel.

    python3 tools/merge_wheels.py --out-dir dist build/cu12/scale_lib-*.whl build/cu13/scale_lib-*.whl

The release wheel holds a CUDA 12 library (libscale_lib_cu12.so) and a CUDA 13 one
(libscale_lib_cu13.so), built by two CMake builds (noxfile.py: build_release). Each build makes
a wheel; this takes the first wheel and adds every library (<package>/lib*.so) of the others.
Every other file must be the same in all of them (the same sources built twice), and no library
may come twice. The RECORD is rewritten and the archive written with sorted entries and fixed
file times (SOURCE_DATE_EPOCH, else 1980-01-01), so the same inputs give the same bytes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import time
import zipfile
from pathlib import Path

LIBRARY = re.compile(r"[^/]+/lib[^/]+\.so")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def merge(wheels: list[Path], out_dir: Path) -> Path:
    names = {w.name for w in wheels}
    if len(names) != 1:
        sys.exit(f"merge_wheels: the wheels must have one name (one commit, one tag): {sorted(names)}")
    files: dict[str, bytes] = {}
    modes: dict[str, int] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if info.filename.endswith(".dist-info/RECORD"):
                    continue
                data = zf.read(info)
                if info.filename in files:
                    if LIBRARY.fullmatch(info.filename):
                        sys.exit(f"merge_wheels: {info.filename} is in more than one wheel")
                    if files[info.filename] != data:
                        sys.exit(f"merge_wheels: {info.filename} differs between the wheels")
                    continue
                files[info.filename] = data
                modes[info.filename] = info.external_attr
    (record,) = {n.rsplit("/", 1)[0] + "/RECORD" for n in files if n.endswith(".dist-info/METADATA")}
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    date_time = time.gmtime(max(epoch, 315532800))[:6]
    out_dir.mkdir(parents=True, exist_ok=True)
    merged = out_dir / wheels[0].name
    # The .dist-info directory last, RECORD last of all, as wheels are written.
    order = sorted(files, key=lambda n: (".dist-info/" in n, n))
    lines = [_record_line(n, files[n]) for n in order] + [f"{record},,"]
    files[record] = ("\n".join(lines) + "\n").encode()
    modes[record] = 0o644 << 16
    with zipfile.ZipFile(merged, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in [*order, record]:
            info = zipfile.ZipInfo(name, date_time)
            info.external_attr = modes[name]
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])
    libraries = sorted(Path(n).name for n in files if LIBRARY.fullmatch(n))
    print(f"merge_wheels: {merged.name}: {', '.join(libraries)}")
    return merged


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--out-dir", required=True, type=Path)
    args = parser.parse_args(argv)
    merge(args.wheels, args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
