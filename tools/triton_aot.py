#!/usr/bin/env python3
"""Compile a Triton source file ahead of time into fatbins the library embeds (no GPU needed).

    python3 tools/triton_aot.py kernels/NAME/NAME.py --archs "75-real;90-real;90-virtual" \\
        --ptxas /usr/local/cuda/bin/ptxas --fatbinary /usr/local/cuda/bin/fatbinary --out-dir DIR

CMake runs it for every ``kernels/<op>/<op>.py`` (see CMakeLists.txt) with the build's CUDA
architectures and toolkit. The source declares ``SPECIALIZATIONS``: entry-point name -> a dict
with ``kernel`` (a ``@triton.jit`` function), ``signature`` (every non-constexpr argument in
Triton's notation: ``*fp32``, ``i64``, ...), ``constexprs``, ``multiple_of_16`` (argument names
known to be 16-byte aligned pointers or integers divisible by 16) and ``num_warps`` (optional:
``num_stages``, ``num_ctas``). For each entry point it writes:

- ``DIR/<entry>.fatbin``: a cubin for every ``NN-real`` architecture and PTX for every
  ``NN-virtual`` one (a family target ``NNf-real``: a cubin for each of its GPUs and PTX for
  the family, see FAMILIES), compiled by Triton with the build toolkit's ptxas, so that the cubins need
  the same driver as the library's other kernels (Triton's bundled ptxas is newer);

and for the source file:

- ``DIR/<NAME>_triton.S``: the fatbins, assembled into the library as hidden symbols;
- ``DIR/<NAME>_triton.h``: ``k<Name>TritonKernels``, the launch data of every entry point
  (include/triton_launcher.h), checked to be the same for every architecture.

Triton decides the launch data (threads per block = 32 * num_warps, dynamic shared memory,
scratch sizes, CTAs per cluster) when it compiles; the launcher must use exactly those.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The fields of Triton's metadata the launcher needs; each must be the same for every
# architecture, as the launcher has one record per entry point.
LAUNCH_FIELDS = (
    "num_warps",
    "num_ctas",
    "shared",
    "global_scratch_size",
    "global_scratch_align",
    "profile_scratch_size",
    "profile_scratch_align",
)
SPEC_KEYS = {"kernel", "signature", "constexprs", "multiple_of_16", "num_warps", "num_stages", "num_ctas"}


# [families.begin]
# The GPUs of each family target CUDA names (sm_100f: machine code for every GPU of the family).
# Triton has no family targets: from Hopper on it compiles for one GPU (sm_100a runs on sm_100
# only), so a family target gets a cubin for each of its GPUs, and PTX that the family's GPUs,
# and newer ones, can JIT-compile (with no instruction of one GPU only: portable_ptx).
FAMILIES = {100: (100, 103), 110: (110,), 120: (120, 121)}
# [families.end]


def parse_architectures(text: str) -> tuple[list[int], list[int]]:
    """CMake's CUDA architecture list -> (cubin architectures, PTX architectures)."""
    real: list[int] = []
    virtual: list[int] = []
    for item in filter(None, re.split(r"[;\s]+", text)):
        match = re.fullmatch(r"(\d+)(f?)(-real|-virtual)?", item)
        if not match or (match.group(2) and int(match.group(1)) not in FAMILIES):
            sys.exit(
                f"triton_aot: cannot compile Triton kernels for the CUDA architecture {item!r}: "
                "name architectures by number (e.g. 90-real;90-virtual) or a family this script "
                f"knows ({', '.join(f'{f}f' for f in FAMILIES)})"
            )
        number, family, kind = int(match.group(1)), match.group(2), match.group(3)
        if family and kind != "-real":
            sys.exit(f"triton_aot: {item!r}: a family target takes -real (its PTX is the family's own)")
        if family:
            real.extend(FAMILIES[number])
            virtual.append(number)
            continue
        if kind in (None, "-real"):
            real.append(number)
        if kind in (None, "-virtual"):
            virtual.append(number)
    if not real and not virtual:
        sys.exit("triton_aot: no CUDA architectures given")
    return sorted(set(real)), sorted(set(virtual))


def load_source(path: Path) -> dict[str, dict[str, Any]]:
    spec = importlib.util.spec_from_file_location(f"_triton_source_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Triton reads the kernel's source through its module
    spec.loader.exec_module(module)
    specializations = getattr(module, "SPECIALIZATIONS", None)
    if not isinstance(specializations, dict) or not specializations:
        sys.exit(f"triton_aot: {path} must define SPECIALIZATIONS = {{entry name: {{...}}, ...}}")
    for name, entry in specializations.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            sys.exit(f"triton_aot: {path}: entry name {name!r} is not a C identifier")
        unknown = set(entry) - SPEC_KEYS
        missing = {"kernel", "signature"} - set(entry)
        if unknown or missing:
            sys.exit(
                f"triton_aot: {path}: entry {name!r}: unknown keys {sorted(unknown)}, "
                f"missing keys {sorted(missing)}"
            )
    return specializations


def _ast_source(name: str, entry: dict[str, Any]) -> Any:
    from triton.compiler import ASTSource

    kernel = entry["kernel"]
    constexprs = dict(entry.get("constexprs", {}))
    signature = dict(entry["signature"])
    for arg in constexprs:
        signature[arg] = "constexpr"
    missing = [arg for arg in kernel.arg_names if arg not in signature]
    if missing:
        sys.exit(f"triton_aot: entry {name!r}: arguments without a type or constexpr value: {missing}")
    attrs = {}
    for arg in entry.get("multiple_of_16", ()):
        if arg not in kernel.arg_names:
            sys.exit(f"triton_aot: entry {name!r}: multiple_of_16 names {arg!r}, not an argument")
        attrs[(kernel.arg_names.index(arg),)] = [["tt.divisibility", 16]]
    ordered = {arg: signature[arg] for arg in kernel.arg_names}
    return ASTSource(kernel, signature=ordered, constexprs=constexprs, attrs=attrs)


def compile_entry(name: str, entry: dict[str, Any], capability: int) -> Any:
    """Triton's compiled kernel for one architecture, its entry point named `name`."""
    import triton
    from triton.backends.compiler import GPUTarget

    kernel = entry["kernel"]
    options = {key: entry[key] for key in ("num_warps", "num_stages", "num_ctas") if key in entry}
    # The entry point is named by the kernel's repr (the name given to @triton.jit(repr=...)).
    saved = kernel._repr
    kernel._repr = lambda _: name
    try:
        compiled = triton.compile(
            _ast_source(name, entry), target=GPUTarget("cuda", capability, 32), options=options
        )
    finally:
        kernel._repr = saved
    if compiled.metadata.name != name:
        sys.exit(f"triton_aot: Triton named the entry point {compiled.metadata.name!r}, not {name!r}")
    return compiled


def portable_ptx(ptx: str, capability: int, ptxas: str) -> str:
    """PTX that every GPU of `capability` or newer can JIT-compile: Triton targets sm_90a,
    sm_100a, ... (this generation only) from Hopper on, so the target is set back to sm_NN, and
    ptxas checks that the code uses no instruction of that generation only."""
    ptx = re.sub(r"^(\.target\s+sm_\d+)a\b", r"\1", ptx, flags=re.MULTILINE)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run(
            [ptxas, f"--gpu-name=sm_{capability}", "-o", os.devnull, str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        sys.exit(
            f"triton_aot: the PTX for compute_{capability} uses instructions of sm_{capability}a "
            f"only; list a lower virtual architecture. ptxas said:\n{result.stderr}"
        )
    return ptx


def launch_data(name: str, compiled: dict[int, Any]) -> dict[str, int]:
    records = {cc: {f: int(getattr(k.metadata, f)) for f in LAUNCH_FIELDS} for cc, k in compiled.items()}
    first = next(iter(records.values()))
    for cc, record in records.items():
        if record != first:
            diff = {f: (first[f], record[f]) for f in LAUNCH_FIELDS if record[f] != first[f]}
            sys.exit(
                f"triton_aot: entry {name!r} needs different launch data on sm_{cc}: {diff}; "
                "declare a separate entry point per architecture group"
            )
    return first


def write_fatbin(path: Path, images: list[tuple[str, int, bytes]], fatbinary: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args = [fatbinary, "--64", f"--create={path}"]
        for i, (kind, capability, data) in enumerate(images):
            image = Path(tmp) / f"{i}.{kind}"
            image.write_bytes(data)
            args.append(f"--image3=kind={kind},sm={capability},file={image}")
        subprocess.run(args, check=True)


def camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def write_embedding(out_dir: Path, stem: str, source: Path, entries: dict[str, dict[str, int]]) -> None:
    symbols = {name: f"__scale_lib_triton_{name}" for name in entries}
    asm = [f"// Generated by tools/triton_aot.py from {source.name}: the fatbins, 64-byte aligned."]
    for name, symbol in symbols.items():
        fatbin = (out_dir / f"{name}.fatbin").resolve()
        asm += [
            f'    .section .rodata.{symbol},"a"',
            "    .balign 64",
            f"    .globl {symbol}",
            f"    .hidden {symbol}",
            f"{symbol}:",
            f'    .incbin "{fatbin}"',
        ]
    asm.append('    .section .note.GNU-stack,"",@progbits')
    (out_dir / f"{stem}_triton.S").write_text("\n".join(asm) + "\n")

    guard = f"SCALE_LIB_TRITON_{stem.upper()}_H_"
    lines = [
        f"// Generated by tools/triton_aot.py from kernels/{source.parent.name}/{source.name}: do not edit.",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        '#include "triton_launcher.h"',
        "",
    ]
    lines += [
        f'extern "C" const char {symbol}[] __attribute__((visibility("hidden")));'
        for symbol in symbols.values()
    ]
    lines += ["", "namespace scale_lib {", ""]
    lines.append(f"inline constexpr TritonKernelData k{camel(stem)}TritonKernels[] = {{")
    for name, data in entries.items():
        values = ", ".join(str(data[f]) for f in LAUNCH_FIELDS)
        lines.append(f'    {{"{name}", {symbols[name]}, {values}}},')
    lines += ["};", "", "}  // namespace scale_lib", "", f"#endif  // {guard}", ""]
    (out_dir / f"{stem}_triton.h").write_text("\n".join(lines))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", type=Path)
    parser.add_argument("--archs", required=True, help="CMake's CUDA architectures, ';'-separated")
    parser.add_argument("--ptxas", required=True, help="the build toolkit's ptxas")
    parser.add_argument("--fatbinary", required=True, help="the build toolkit's fatbinary")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument(
        "--no-line-info", action="store_true", help="no source line information (it names absolute paths)"
    )
    args = parser.parse_args(argv)

    real, virtual = parse_architectures(args.archs)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    # Before Triton is imported: its knobs read the environment. A cache of this build's own
    # (a shared cache would keep entry points compiled under another name), the build toolkit's
    # ptxas for every architecture, and FP contraction as Triton's JIT does it today.
    os.environ["TRITON_CACHE_DIR"] = str((args.out_dir / "cache").resolve())
    os.environ["TRITON_PTXAS_PATH"] = args.ptxas
    os.environ["TRITON_PTXAS_BLACKWELL_PATH"] = args.ptxas
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if args.no_line_info:
        os.environ["TRITON_DISABLE_LINE_INFO"] = "1"

    specializations = load_source(args.source)
    entries: dict[str, dict[str, int]] = {}
    report: dict[str, Any] = {}
    for name, entry in specializations.items():
        # Once per architecture: an NN-real and NN-virtual pair shares one compilation.
        compiled = {cc: compile_entry(name, entry, cc) for cc in sorted({*real, *virtual})}
        entries[name] = launch_data(name, compiled)
        images = [("elf", cc, compiled[cc].asm["cubin"]) for cc in real]
        for cc in virtual:
            images.append(("ptx", cc, portable_ptx(compiled[cc].asm["ptx"], cc, args.ptxas).encode()))
        write_fatbin(args.out_dir / f"{name}.fatbin", images, args.fatbinary)
        report[name] = {"launch": entries[name], "cubins": [f"sm_{cc}" for cc in real],
                        "ptx": [f"compute_{cc}" for cc in virtual]}  # fmt: skip
    write_embedding(args.out_dir, args.source.stem, args.source, entries)
    (args.out_dir / f"{args.source.stem}_triton.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"triton_aot: {args.source.name}: {len(entries)} entry points for {args.archs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
