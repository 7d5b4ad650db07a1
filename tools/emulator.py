#!/usr/bin/env python3
"""Run aarch64 programs on this x86-64 machine, under emulation, without a container or a
system install: Debian's qemu-user-static and an arm64 Python 3.11 from Debian packages.

    python3 tools/emulator.py --dest .sysroot/bookworm-arm64
    QEMU=/abs/.sysroot/bookworm-arm64/qemu/usr/bin/qemu-aarch64-static
    ROOT=/abs/.sysroot/bookworm-arm64/root
    PYTHON=/abs/.sysroot/bookworm-arm64/python3.11

What: Debian bookworm's qemu-user-static (amd64; a static program) and the arm64 packages of
python3.11 with the C and C++ runtimes and the libraries its standard modules load (versions and
SHA-256 pinned below), downloaded with `apt-get download` into a private apt state (the mirror
of this machine's apt sources, as tools/sysroot.py does; --debian-mirror or
$SCALE_LIB_DEBIAN_MIRROR names another), unpacked with `dpkg -x` into DEST/root, absolute
symlinks rewritten to point inside it. PYTHON is a script that runs the root's python3.11 under
`qemu-aarch64-static -L DEST/root` (the root's loader and libraries first, this machine's files
otherwise) and names itself as the interpreter (sys.executable), so that a test that starts a
child Python starts an emulated one. The interpreter runs with -S: no site-packages of this
machine; PYTHONPATH names the packages (aarch64 wheels, e.g. unpacked with `pip install
--target DIR --platform manylinux2014_aarch64 --only-binary=:all:`).

Everything is cached in DEST: a second run downloads nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cuda_toolchain import apt_download
from sysroot import _relink

SUITE = "bookworm"
# The emulator (amd64).
QEMU_PACKAGES = [
    (
        "qemu-user-static",
        "1:7.2+dfsg-7+deb12u18+b3",
        "c3e3ba2bd87f8c5b9a5da5ef21b5a3b82d7c63b89dd448d9ddaa4eabc5b6e402",
    ),
]
# The interpreter and what it and the wheels under test load (arm64): glibc, libgcc_s, libstdc++
# (NumPy's and TVM-FFI's C++), expat, zlib, libffi (ctypes), OpenSSL (hashlib),
# bzip2, xz, uuid.
PYTHON_PACKAGES = [
    (
        "python3.11-minimal",
        "3.11.2-6+deb12u8",
        "6a07dd571f1a15af2f855d64571766fe44b73a57cc3b5ca79502bc89156a5e12",
    ),
    (
        "libpython3.11-minimal",
        "3.11.2-6+deb12u8",
        "c48bac178c0fc43a2bf8ace784c762b5ee83e2b981894a991dc3ccfd3ec7cd4b",
    ),
    (
        "libpython3.11-stdlib",
        "3.11.2-6+deb12u8",
        "e79876de55c6c2dca10d044b2fa69ccd863950ea01714220c1982d16008105f9",
    ),
    ("libc6", "2.36-9+deb12u14", "01f4330719fd4f65580e16ea5a0527f372fca750e8f588d26deaf09f2d3b1cf4"),
    ("libgcc-s1", "12.2.0-14+deb12u1", "576926b283613db80168ddf76380a3bd877602778cf0d226caa7bfbfa71eacf3"),
    ("libstdc++6", "12.2.0-14+deb12u1", "26e138c677a985775331373828a6c286c551ff397cb735d00e2383cb273d1cb2"),
    ("libexpat1", "2.5.0-1+deb12u2", "8dc1976735acf825e3a922d82f171e20feec7394da2b8c616091983e38706275"),
    ("zlib1g", "1:1.2.13.dfsg-1", "52b8b8a145bbe1956bba82034f77022cbef0c3d0885c9e32d9817a7932fe1913"),
    ("libffi8", "3.4.4-1", "80b5c36177dc0e29d531c7eddbed3cc7355cb490e49f8cfa5959572d161f27b3"),
    ("libssl3", "3.0.20-1~deb12u2", "a256e03cc3abd7243ac5c6ee91a9deb56478221ef0d3c2b0748551e13140c0bf"),
    ("libbz2-1.0", "1.0.8-5+b1", "d3a96ece03326498b39ff093a76800dfcbcb1d4049d6ae6e9f6fa1aa7a590ad6"),
    ("liblzma5", "5.4.1-1+deb12u1", "647ce9d81e41c30071ce6ac0d3324579216a33aaa1d28971d6952315f6a95a75"),
    ("libuuid1", "2.38.1-5+deb12u3", "3b2d19df0f3190108cf54228c4cfc822226c06d8f3615a5ab16a7dffb1f58aed"),
]
PYTHON_WRAPPER = """\
#!/bin/sh
# Written by tools/emulator.py: Debian's arm64 Python 3.11, emulated; it names this script as
# its interpreter, so that a child Python it starts is emulated too.
exec "{qemu}" -L "{root}" -0 "{wrapper}" "{root}/usr/bin/python3.11" -S "$@"
"""


def _log(message: str) -> None:
    print(f"emulator: {message}", file=sys.stderr, flush=True)


def _unpack(
    packages: list[tuple[str, str, str]], arch: str, target: Path, dest: Path, mirror: str | None
) -> None:
    """Download the packages (once per list: a stamp records it) and unpack them into target."""
    stamp = target.parent / f".{target.name}-packages"
    wanted = "\n".join(f"{name}:{arch}={version} {sha256}" for name, version, sha256 in packages)
    if stamp.exists() and stamp.read_text() == wanted and target.is_dir():
        return
    debs = apt_download(packages, SUITE, "main", dest, mirror, arch)
    shutil.rmtree(target, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        unpacked = Path(tmp) / "root"
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), str(unpacked)], check=True)
        _log(f"{target.name}: {_relink(unpacked)} absolute symlinks now point inside it")
        unpacked.rename(target)
    for deb in debs:  # unpacked: the archives are not kept
        deb.unlink()
    stamp.write_text(wanted)


def make_emulator(dest: Path, debian_mirror: str | None = None) -> dict[str, str]:
    """Fetch (or reuse) the emulator and the arm64 Python under dest; return their paths."""
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    _unpack(QEMU_PACKAGES, "amd64", dest / "qemu", dest, debian_mirror)
    _unpack(PYTHON_PACKAGES, "arm64", dest / "root", dest, debian_mirror)
    qemu, root, wrapper = (
        dest / "qemu" / "usr" / "bin" / "qemu-aarch64-static",
        dest / "root",
        dest / "python3.11",
    )
    wrapper.write_text(PYTHON_WRAPPER.format(qemu=qemu, root=root, wrapper=wrapper))
    wrapper.chmod(0o755)
    version = subprocess.run(
        [str(wrapper), "-c", "import platform, sys; print(platform.machine(), sys.version.split()[0])"],
        capture_output=True,
        text=True,
    )
    if version.returncode != 0 or not version.stdout.startswith("aarch64 3.11."):
        sys.exit(f"emulator: {wrapper} does not run here:\n{version.stdout}{version.stderr}")
    return {"QEMU": str(qemu), "ROOT": str(root), "PYTHON": str(wrapper)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--dest", type=Path, help=f"cache directory (default: .sysroot/{SUITE}-arm64)")
    parser.add_argument(
        "--debian-mirror",
        default=os.environ.get("SCALE_LIB_DEBIAN_MIRROR"),
        help="the Debian mirror to fetch the packages from (default: the apt sources')",
    )
    args = parser.parse_args(argv)
    dest = args.dest or Path(__file__).resolve().parent.parent / ".sysroot" / f"{SUITE}-arm64"
    for key, value in make_emulator(dest, args.debian_mirror).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
