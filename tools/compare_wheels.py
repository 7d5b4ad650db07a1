#!/usr/bin/env python3
"""Compare two builds of one wheel, file by file: a reproducible build gives the same bytes.

    python3 tools/compare_wheels.py A.whl B.whl

Prints, for each file of the wheels, whether it is the same; for a shared library that differs,
the ELF sections the differing bytes fall in (readelf), and the first differing bytes with
their surroundings, so that the cause (a path, a time stamp, an ordering) can be read off. Exits
1 if any file differs, or one wheel has a file the other lacks.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path


def sections(library: Path) -> list[tuple[str, int, int]]:
    """(name, file offset, size) of each ELF section, from readelf."""
    if not shutil.which("readelf"):
        return []
    listing = subprocess.run(["readelf", "-S", "-W", str(library)], capture_output=True, text=True).stdout
    found = []
    for m in re.finditer(r"\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", listing):
        found.append((m.group(1), int(m.group(2), 16), int(m.group(3), 16)))
    return found


def describe(a: bytes, b: bytes, library: Path) -> list[str]:
    """Where two builds of a library differ: the sections and the first differences."""
    lines = [f"sizes {len(a)} and {len(b)} bytes"]
    offsets = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
    if len(a) != len(b):
        offsets.append(min(len(a), len(b)))
    in_section: dict[str, int] = {}
    elf_sections = sections(library)
    for offset in offsets:
        name = next((n for n, start, size in elf_sections if start <= offset < start + size), "(none)")
        in_section[name] = in_section.get(name, 0) + 1
    lines.append(
        f"{len(offsets)} differing bytes, in sections: "
        + ", ".join(f"{name} ({count})" for name, count in sorted(in_section.items()))
    )
    shown = 0
    previous = -100
    for offset in offsets:
        if offset - previous > 64 and shown < 5:
            context = slice(max(0, offset - 24), offset + 40)
            lines.append(f"at 0x{offset:x}: {a[context]!r}")
            lines.append(f"{'':>{len(f'at 0x{offset:x}')}}  {b[context]!r}")
            shown += 1
        previous = offset
    return lines


def compare(first: Path, second: Path) -> list[str]:
    problems = []
    with zipfile.ZipFile(first) as za, zipfile.ZipFile(second) as zb:
        names_a, names_b = set(za.namelist()), set(zb.namelist())
        for name in sorted(names_a ^ names_b):
            problems.append(f"{name}: only in {first if name in names_a else second}")
        for name in sorted(names_a & names_b):
            a, b = za.read(name), zb.read(name)
            if a == b:
                print(f"  same: {name} ({len(a)} bytes, sha256 {hashlib.sha256(a).hexdigest()[:16]})")
                continue
            problems.append(f"{name} differs")
            if name.endswith(".so"):
                with tempfile.TemporaryDirectory() as tmp:
                    library = Path(tmp) / "lib.so"
                    library.write_bytes(a)
                    problems += [f"  {line}" for line in describe(a, b, library)]
    if not problems:
        same = first.read_bytes() == second.read_bytes()
        print(f"  the wheels are {'identical' if same else 'the same file by file (the archives differ)'}")
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args(argv)
    print(f"comparing {args.first} and {args.second}")
    problems = compare(args.first, args.second)
    for problem in problems:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
