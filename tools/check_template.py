#!/usr/bin/env python3
"""The template's own CI (nox -s template): every flow of docs/template.md, as a user runs it.

  1. generate three libraries: `scale` only, --ops rms_norm, and every op (with a long name);
     check each as generated, with its own tools/dev.py and noxfile (the sessions its .ci/run
     runs: lint and tests_numpy against a CPU-only build; docs after step 2), plus what must
     hold of a library mechanically: no file names an op it does not have (git grep of every
     template op it dropped finds nothing), and its own tests check that every session its
     workflows and .ci/run name and every <lib>.<name> its docs call exist;
  1b. generate each example op alone: no file names an op the library
     lacks, its Python passes ruff (check and format), and its own checks that need no build
     (sessions, paths and included regions its docs, .ci/run and workflows name) pass;
  2. in each of the three, as docs/adding_an_op.md and docs/scan.md say: add silu_mul, an
     elementwise op with the documented vjp (tools/new_op.py, then the user's edits), and
     prefix_sum and cumprod, scans (--kind scan, cumprod with --scan-op prod; docs/scan.md's code
     is what the scaffold wrote), add an op of its own kernels (--kind custom), where the
     library has softmax a copy of it (new_op.py fast_softmax --like softmax), where it has
     rms_norm a copy of that (my_norm --like rms_norm), remove one op
     (tools/remove_op.py), commit; then the same checks and its docs (the removed op dropped
     too). Every kind of scaffold meets every framework in step 4, once;
  3. generate a library at the last template commit with one ops.py (a section per op), edit a
     kernel, a shared file and scale's section in it and add an op of its own, then update it to
     the newest template commit (tools/update_from_template.py): both the template's changes
     (ops/, one module per op) and the library's own edits and op must be there, with no
     conflict, and its tests pass;
  4. scaffold, in a clean clone of a generated library (tools/new_op.py), a two-input elementwise
     op with an attribute, a row-wise op, a CUDA-only op, an op of its own kernels (--kind custom),
     a scan with attributes, a running product
     (--scan-op prod, its vjp through _scan_vjp) and a Triton op (--lang triton, with a float, an
     int and a bool attribute) as generated, and silu_mul and gelu_tanh as a user writes them (the
     math in one function object, the float64 reference, silu_mul's vjp with array_namespace);
     lint, build CPU-only and run their tests with every framework (NumPy, PyTorch, JAX, Paddle:
     silu_mul's gradients by torch.autograd.gradcheck and against jax.grad of jax.numpy), then
     compile the CUDA kernels for one architecture where nvcc is found (the
     Triton op's through tools/triton_aot.py: Triton compiles it, no GPU needed); finally remove
     the Triton op (tools/remove_op.py) and check that nothing names it.

Libraries are built CPU-only. Run from the template checkout with a Python that has copier, ruff
and clang-format at the pinned versions, pre-commit, pip and git: nox -s template does that.

    python tools/check_template.py WORKDIR [--only generate|combinations|evolve|update|scaffold]
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
CPU_ONLY = "OFF"
STEPS: list[tuple[str, float]] = []
GENERATED: set[Path] = set()
# A name much longer than the template's: every line that names the library grows with it.
LONG_NAME = "acme_fused_attention_kernels"


def run(*cmd: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None, check: bool = True) -> str:
    print(f"  $ {' '.join(map(str, cmd))}  [in {cwd}]", flush=True)
    result = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if result.returncode != 0 and check:
        print(result.stdout[-6000:])
        raise SystemExit(f"FAILED (exit {result.returncode}): {' '.join(map(str, cmd))}")
    return result.stdout


def step(title: str):
    """Prints the step and its duration."""

    class Step:
        def __enter__(self) -> None:
            print(f"\n== {title}", flush=True)
            self.start = time.monotonic()

        def __exit__(self, kind, *rest) -> None:
            if kind is None:
                took = time.monotonic() - self.start
                STEPS.append((title, took))
                print(f"   ok ({took:.0f} s)", flush=True)

    return Step()


def generate(name: str, dest: Path, *extra: str, template: Path = ROOT) -> None:
    run(PY, template / "tools" / "new_library.py", name, "--dest", dest, "--force", *extra, cwd=template)
    GENERATED.add(dest)
    log = run("git", "log", "--oneline", cwd=dest).splitlines()
    assert len(log) == 1, f"{dest}: expected one initial commit, got {log}"
    assert (dest / ".copier-answers.yml").is_file(), "no .copier-answers.yml"
    text = "\n".join(p.read_text() for p in (dest / "README.md", dest / "CHANGELOG.md"))
    for phrase in ("fork it", "starter repository", "scale_lib", "## 0."):
        assert phrase not in text, f"{dest}: README/CHANGELOG still say {phrase!r}"
    assert not (dest / "docs" / "_static" / "perf").exists(), "template results copied"
    assert not (dest / "tools" / "new_library.py").exists(), "template machinery copied"


def check(name: str, dest: Path, *, docs: bool = True) -> None:
    """The library's own CI sessions, through its own tools/dev.py and noxfile, against a
    CPU-only build: lint, docs (-W) and tests_numpy (the suite with NumPy: every framework's
    run of the scaffolds is flow_scaffold's)."""
    env = {f"{name.upper()}_CUDA": CPU_ONLY}
    run(PY, "tools/dev.py", "lint", *(["docs"] if docs else []), cwd=dest, env=env)
    pytest_args = ["-q", "-x", "-p", "no:cacheprovider"]
    out = run(PY, "tools/dev.py", "tests_numpy", "--", *pytest_args, cwd=dest, env=env)
    summary = [line for line in out.splitlines() if " passed" in line or " failed" in line]
    print("   " + (summary[-1].strip() if summary else "(no summary)"))
    if not summary or " passed" not in summary[-1]:
        raise SystemExit(f"FAILED: no test ran in {dest}")


def template_ops() -> list[str]:
    """The example ops of this template, as its ops/__init__.py registers them."""
    return runpy.run_path(str(ROOT / "tools" / "remove_op.py"))["declared_ops"]()


# The generated libraries: (name, example ops kept, the op each removes after adding its own).
# The custom op is removed from the minimal one: it has no example op but scale, which stays.
def libraries() -> list[tuple[str, list[str], str]]:
    every = [op for op in template_ops() if op != "scale"]
    return [
        ("my_kernels", [], "clamp_add"),
        ("rms_kernels", ["rms_norm"], "rms_norm"),
        (LONG_NAME, every, "l2_norm"),
    ]


def needs_triton_to_build(dest: Path) -> bool:
    """Whether the library's build requires Triton (pyproject.toml's build.requires)."""
    import tomllib

    config = tomllib.loads((dest / "pyproject.toml").read_text())["tool"]["scikit-build"]
    return any(r.startswith("triton") for r in config.get("build", {}).get("requires", []))


def check_triton_build(dest: Path) -> None:
    """Triton is a build requirement exactly while the library has a Triton kernel."""
    kernels = sorted(p.name for p in (dest / "kernels").glob("*/*.py") if p.parent.name in (p.stem, "triton"))
    assert needs_triton_to_build(dest) == bool(kernels), f"{dest.name}: Triton kernels {kernels}, " + (
        "but Triton is no build requirement" if kernels else "but Triton is still a build requirement"
    )


def check_names(dest: Path, kept: set[str]) -> None:
    """Nothing in the library names a template op it does not have (another module's function of
    the same name, such as NumPy's `np.cumsum` beside the `cumsum` example op, is not the op)."""
    for op in sorted(set(template_ops()) - kept):
        found = run("git", "grep", "-n", "-w", op, cwd=dest, check=False)
        own = re.compile(rf"(?<![.\w]){re.escape(op)}\b")
        left = "\n".join(line for line in found.splitlines() if own.search(line.split(":", 2)[-1]))
        assert not left.strip(), f"{dest.name}: files still naming {op}, which it does not have:\n{left}"


def flow_generate(work: Path) -> None:
    for name, ops, _ in libraries():
        dest = work / name
        with step(f"generate {name}" + (f" with --ops {','.join(ops)}" if ops else " (scale only)")):
            generate(name, dest, *(["--ops", ",".join(ops)] if ops else []))
            for op in ("scale", *ops):
                assert (dest / "tests" / f"test_{op}.py").is_file(), op
            check_names(dest, {"scale", *ops})
            check_triton_build(dest)
        with step("  its lint and tests (NumPy)"):
            check(name, dest, docs=False)


# The library's own checks that need no build: every session its docs, .ci/run and workflows
# name exists in its noxfile, every path they name exists, every region its docs include exists,
# every number its docs state is rendered from its source or says where it comes from.
STATIC_CHECKS = "session or path_named or literalinclude or workflow_parser or number or rendered"


def flow_combinations(work: Path) -> None:
    """Each example op alone: what each generated library names, it has. Pruning deletes an
    op's own files and cuts nothing out of shared ones, so a name left dangling is an op's name
    in a shared file (or in a file of another op): every library without that op shows it."""
    every = [op for op in template_ops() if op != "scale"]
    covered = [sorted(ops) for _, ops, _ in libraries()]
    choices = [[op] for op in every]
    more = len([c for c in choices if sorted(c) not in covered])
    with step(f"generate {more} more op choices; names, lint, static checks"):
        for ops in choices:
            if sorted(ops) in covered:
                continue
            dest = work / "choice"
            generate("choice_kernels", dest, "--ops", ",".join(ops))
            check_names(dest, {"scale", *ops})
            check_triton_build(dest)
            # The Python lint (what removing blocks can break: an import left unused, a gap).
            run(PY, "-m", "ruff", "check", "-q", ".", cwd=dest)
            run(PY, "-m", "ruff", "format", "-q", "--check", ".", cwd=dest)
            run(
                PY, "-m", "pytest", "-q", "--noconftest", "-p", "no:cacheprovider",
                "tests/test_docs.py", "-k", STATIC_CHECKS, cwd=dest,
            )  # fmt: skip
            print(f"   --ops {','.join(ops)}: ok", flush=True)
            shutil.rmtree(dest)


def flow_evolve(work: Path) -> None:
    for name, ops, removed in libraries():
        dest = work / name
        if dest not in GENERATED:  # run on its own: a fresh library
            generate(name, dest, *(["--ops", ",".join(ops)] if ops else []))
        new_op = [PY, "tools/new_op.py"]
        with step(f"{name}: add silu_mul (its documented vjp), prefix_sum, cumprod (scans), clamp_add"):
            run(*new_op, "silu_mul", "--inputs", "x,y", cwd=dest)
            edited = _apply(dest, name, SILU_MUL_EDITS)
            run(*new_op, "prefix_sum", "--kind", "scan", cwd=dest)
            check_scan_page(dest, name)
            run(*new_op, "cumprod", "--kind", "scan", "--scan-op", "prod", cwd=dest)
            run(
                *new_op,
                "clamp_add",
                "--inputs",
                "a,b",
                "--attrs",
                "limit:float",
                "--kind",
                "custom",
                cwd=dest,
            )
            print("   files the user edited: " + ", ".join(sorted(edited)))
        with step("  lint holds the scaffolds' notes until the author has been through them"):
            finish_scaffolds(dest)
        added = {"silu_mul", "prefix_sum", "cumprod"}
        if "softmax" in ops:
            with step(f"{name}: add fast_softmax, a copy of the NVRTC example (new_op.py --like softmax)"):
                run(*new_op, "fast_softmax", "--like", "softmax", cwd=dest)
                added.add("fast_softmax")
        if "rms_norm" in ops and removed != "rms_norm":  # its copy's tests name torch's rms_norm
            with step(f"{name}: add my_norm, a copy of the reduction example (new_op.py --like rms_norm)"):
                run(*new_op, "my_norm", "--like", "rms_norm", cwd=dest)
                added.add("my_norm")
        with step(f"  remove {removed} (tools/remove_op.py), commit"):
            run(PY, "tools/remove_op.py", removed, cwd=dest)
            _commit(dest, f"{', '.join(sorted(added))}; without {removed}")
            answers = (dest / ".copier-answers.yml").read_text()
            assert removed not in answers, answers
            check_names(dest, ({"scale", *ops} - {removed}) | added)
            left = run("git", "grep", "-n", "-w", removed, cwd=dest, check=False)
            assert not left.strip(), f"{name}: files still naming {removed}:\n{left}"
        with step("  its lint, docs and tests (NumPy)"):
            check(name, dest)
        # Its environments go once checked: a CI disk holds one library's, not three.
        shutil.rmtree(dest / ".nox")


def finish_scaffolds(dest: Path) -> None:
    """The lint's scaffold-notes hook fails on what tools/new_op.py left for the author (each
    `TODO(author)` note, the README rows marked scaffolded); the author's pass, here the notes
    deleted (the pattern is the hook's own) and the placeholder math kept, clears it."""
    import yaml  # pre-commit's own dependency

    config = yaml.safe_load((dest / ".pre-commit-config.yaml").read_text())
    ((entry, exclude),) = [
        (h["entry"], h.get("exclude", "^$"))
        for r in config["repos"]
        for h in r["hooks"]
        if h["id"] == "scaffold-notes"
    ]
    note = f"(?:{entry}) ?"  # and the space after a note
    hook = subprocess.run(
        ["pre-commit", "run", "scaffold-notes", "--all-files"], cwd=dest, capture_output=True, text=True
    )
    assert hook.returncode != 0, hook.stdout + hook.stderr
    assert "README.md" in hook.stdout, hook.stdout
    for path in run("git", "grep", "--untracked", "-l", "-E", entry, cwd=dest).split():
        if not re.search(exclude, path):  # the hook's own exceptions (the scaffolds' templates)
            text = (dest / path).read_text()
            text = re.sub(note, lambda found: "|" if "|" in found[0] else "", text, flags=re.M)
            (dest / path).write_text(text)
    run("pre-commit", "run", "scaffold-notes", "--all-files", cwd=dest)


def check_scan_page(dest: Path, name: str) -> None:
    """docs/scan.md shows what new_op.py prefix_sum --kind scan wrote: each of its blocks marked as
    written by new_op.py is in the scaffolded files as it is on the page."""
    page = (dest / "docs" / "scan.md").read_text()
    written = "\n".join(
        (dest / path).read_text() for path in (f"python/{name}/ops/prefix_sum.py", "tests/test_prefix_sum.py")
    )
    blocks = re.findall(
        r"<!-- doc-test: skip: [^>]*new_op\.py writes[^>]*-->\n```python\n(.*?)```", page, re.DOTALL
    )
    assert len(blocks) >= 2, "docs/scan.md: no blocks of what new_op.py writes"
    for block in blocks:
        assert block in written, f"docs/scan.md shows code new_op.py no longer writes:\n{block}"


def flow_update(work: Path) -> None:
    template = work / "template"
    dest = work / "updated"
    with step("a template clone; a library generated from its last commit with ops.py and kernels/<op>.cu"):
        shutil.rmtree(template, ignore_errors=True)
        run("git", "clone", "-q", ROOT, template)
        if run("git", "status", "--porcelain", cwd=ROOT).strip():
            # Uncommitted template changes belong to the version under test: commit them there.
            run("bash", "-c", f"git -C {ROOT} diff HEAD --binary | git apply --index", cwd=template)
            _commit(template, "uncommitted changes of the checkout under test")
        # The commit that made each op a module of ops/ and a folder of kernels/ (the last to touch
        # ops.py), and the one before it.
        moved = run("git", "rev-list", "-1", "HEAD", "--", "python/scale_lib/ops.py", cwd=template).strip()
        generate("my_kernels", dest, "--vcs-ref", f"{moved}^", template=template)
    with step("the template moves on: a kernel and a shared header change upstream"):
        _edit(
            template / "kernels" / "scale" / "scale_cpu.cc", 0, "// CPU twin of scale.cu (upstream change)."
        )
        _edit(
            template / "include" / "tvm_ffi_utils.h",
            4,
            "// kernel author works against lives here (upstream change).",
        )
        _commit(template, "upstream change")
    with step("the library edits a kernel, the shared header and scale's declaration, adds an op, commits"):
        _append(dest / "kernels" / "scale.cu", "// library edit: a kernel of our own")
        ops_py = dest / "python" / "my_kernels" / "ops.py"
        ops_py.write_text(
            ops_py.read_text().replace("``out = x * factor``.", "``out = x * factor`` (ours).", 1)
        )
        run(PY, "tools/new_op.py", "own_op", "--attrs", "alpha:float", cwd=dest)
        _edit(
            dest / "include" / "tvm_ffi_utils.h",
            0,
            "// Shared plumbing for every my_kernels kernel (library edit).",
        )
        _commit(dest, "library edits")
    with step("update the library to the template's newest commit (tools/update_from_template.py)"):
        renders = "render_op_lists" in (dest / "tools" / "update_from_template.py").read_text()
        run(PY, "tools/update_from_template.py", "HEAD", cwd=dest)
        if not renders:  # a tool from before the ops spans: the user renders them, as test_docs says
            run(PY, "tools/render_docs.py", cwd=dest)
        touched = run("git", "status", "--short", cwd=dest)
        print("   " + touched.strip().replace("\n", "\n   "))
        header = (dest / "include" / "tvm_ffi_utils.h").read_text()
        assert "(library edit)" in header, header[:600]
        assert "(upstream change)" in header, header[:600]
        # Each op's files are in its folder now: the library's edit of scale.cu went with it.
        assert "(upstream change)" in (dest / "kernels" / "scale" / "scale_cpu.cc").read_text()
        assert "library edit: a kernel of our own" in (dest / "kernels" / "scale" / "scale.cu").read_text()
        assert not (dest / "kernels" / "scale.cu").exists(), "kernels/scale.cu left beside kernels/scale/"
        ops = dest / "python" / "my_kernels" / "ops"
        assert not ops_py.exists(), "ops.py left beside ops/"
        assert "``out = x * factor`` (ours)." in (ops / "scale.py").read_text(), "the edit of scale lost"
        assert "def own_op(" in (ops / "own_op.py").read_text(), "the library's own op lost"
        assert "from .own_op import own_op as own_op" in (ops / "__init__.py").read_text()
        grep = subprocess.run(
            ["git", "grep", "-l", "-e", "^<<<<<<< "], cwd=dest, capture_output=True, text=True
        )
        conflicts = grep.stdout.split()
        assert not list(dest.rglob("*.rej")), "update left rejected hunks"
        assert not conflicts, f"update left conflicts in {conflicts}"
        _commit(dest, "update from the template")
    with step("  the updated library's lint and tests"):
        finish_scaffolds(dest)
        check("my_kernels", dest, docs=False)


# What a user writes after scaffolding silu_mul and gelu_tanh: (file, scaffolded text, edit).
SILU_MUL_EDITS = [
    ("kernels/silu_mul/silu_mul.h", "return (x + y);", "return x / (C(1) + std::exp(-x)) * y;"),
    ("tests/test_silu_mul.py", "return x + y\n", "return x / (1 + np.exp(-x)) * y\n"),
    (
        "python/{lib}/ops/silu_mul.py",
        "    # out = (x + y): the same gradient for every input.\n    g = grad\n    return (g, g)\n",
        "    xp = array_namespace(x)\n    s = 1 / (1 + xp.exp(-x))\n"
        "    return grad * y * s * (1 + x * (1 - s)), grad * x * s\n",
    ),
    (
        "python/{lib}/ops/silu_mul.py",
        "from {lib}._spec import",
        "from {lib}._namespace import array_namespace\nfrom {lib}._spec import",
    ),
]
GELU_TANH_EDITS = [
    (
        "kernels/gelu_tanh/gelu_tanh.h",
        "return x;",
        "return C(0.5) * x * (C(1) + std::tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x)));",
    ),
    (
        "python/{lib}/ops/gelu_tanh.py",
        "    # out = x: the same gradient for every input.\n    g = grad\n    return (g,)\n",
        "    xp = array_namespace(x)\n"
        "    t = xp.tanh(0.7978845608028654 * (x + 0.044715 * x**3))\n"
        "    dt = (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x)\n"
        "    return (grad * (0.5 * (1 + t) + 0.5 * x * dt),)\n",
    ),
    (
        "python/{lib}/ops/gelu_tanh.py",
        "from {lib}._spec import",
        "from {lib}._namespace import array_namespace\nfrom {lib}._spec import",
    ),
    (
        "tests/test_gelu_tanh.py",
        "    return x\n",
        "    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))\n",
    ),
]
# Beside the generated tests: silu_mul's gradients by PyTorch's own check and against JAX's.
SILU_MUL_GRADIENTS = """\
import numpy as np
import pytest

import {lib}


def test_torch_gradcheck() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck({lib}.silu_mul, (x, y))


def test_jax_grad_matches_jax_numpy() -> None:
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x, y, w = (jnp.asarray(np.random.default_rng(i).standard_normal((5, 7))) for i in range(3))

    def ours(a, b):
        return jnp.sum({lib}.silu_mul(a, b) * w)

    def theirs(a, b):
        return jnp.sum(jax.nn.silu(a) * b * w)

    expected = jax.grad(theirs, argnums=(0, 1))(x, y)
    for f in (jax.grad(ours, argnums=(0, 1)), jax.jit(jax.grad(ours, argnums=(0, 1)))):
        for got, want in zip(f(x, y), expected, strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-14)
"""


def _apply(repo: Path, lib: str, edits: list[tuple[str, str, str]]) -> set[str]:
    for path, old, new in edits:
        file = repo / path.format(lib=lib)
        old, new = old.replace("{lib}", lib), new.replace("{lib}", lib)
        text = file.read_text()
        assert old in text, f"{path}: scaffolded text {old!r} not found"
        file.write_text(text.replace(old, new, 1))
    return {path.format(lib=lib) for path, _, _ in edits}


def flow_scaffold(work: Path) -> None:
    name = "fastops"
    origin, dest = work / "scaffold_origin", work / name
    new_op = [PY, "tools/new_op.py"]
    ops = ["fma", "row_norm", "wsum", "run_prod", "clamp_add", "gelu_tanh", "silu_mul", "tri_fma"]
    with step("generate a library; a clean clone of it"):
        generate(name, origin)
        shutil.rmtree(dest, ignore_errors=True)
        run("git", "clone", "-q", origin, dest)
    with step("scaffold an elementwise op of two inputs and an attribute, a row-wise, CUDA-only, custom op"):
        # Inputs not called x: messages and the suites that run every op take the declared names.
        run(*new_op, "fma", "--inputs", "a,b", "--attrs", "alpha:float", cwd=dest)
        run(*new_op, "row_norm", "--inputs", "x", "--attrs", "eps:float", "--kind", "rows", cwd=dest)
        run(*new_op, "gelu_tanh", "--cuda-only", cwd=dest)
        run(*new_op, "clamp_add", "--inputs", "a,b", "--attrs", "limit:float", "--kind", "custom", cwd=dest)
    with step("scaffold a scan of two inputs with a float and a bool attribute, a running product"):
        run(
            *new_op,
            "wsum",
            "--inputs",
            "a,b",
            "--attrs",
            "alpha:float,negate:bool",
            "--kind",
            "scan",
            cwd=dest,
        )
        run(*new_op, "run_prod", "--kind", "scan", "--scan-op", "prod", cwd=dest)
    with step("scaffold a Triton op (--lang triton) with a float, an int and a bool attribute"):
        attrs = "alpha:float,times:int,negate:bool"
        assert not needs_triton_to_build(dest), "a library without Triton kernels requires Triton"
        run(*new_op, "tri_fma", "--inputs", "a,b", "--attrs", attrs, "--lang", "triton", cwd=dest)
        check_triton_build(dest)  # restored by new_op.py
    with step("silu_mul and gelu_tanh as a user writes them (math, reference, vjp)"):
        run(*new_op, "silu_mul", "--inputs", "x,y", cwd=dest)
        edited = _apply(dest, name, SILU_MUL_EDITS) | _apply(dest, name, GELU_TANH_EDITS)
        (dest / "tests" / "test_silu_mul_gradients.py").write_text(SILU_MUL_GRADIENTS.format(lib=name))
        finish_scaffolds(dest)
        # The user formats what they wrote (the formatters fix it; the lint step below checks).
        subprocess.run(["pre-commit", "run", "--all-files"], cwd=dest, capture_output=True, check=False)
        files = run("git", "status", "--short", cwd=dest)
        print("   files the user edited: " + ", ".join(sorted(edited)))
        print("   " + files.strip().replace("\n", "\n   "))
    with step("  lint of the library with its new ops"):
        run("pre-commit", "run", "--all-files", "--show-diff-on-failure", cwd=dest)
    with step("  CPU-only build; the new ops' tests with NumPy, PyTorch, JAX and Paddle"):
        env = {f"{name.upper()}_CUDA": CPU_ONLY}
        run(PY, "-m", "pip", "install", "-q", os.environ.get("TORCH_SPEC", "torch"), cwd=dest)
        run(PY, "-m", "pip", "install", "-q", f"{dest}[test,jax,paddle,array-api]", cwd=dest, env=env)
        tests = [f"tests/test_{op}.py" for op in ops]
        tests += [
            "tests/test_silu_mul_gradients.py",
            "tests/test_signatures.py",
            "tests/test_declared_ops.py",
        ]
        tests += ["tests/test_bad_inputs.py", "tests/test_hostile.py", "tests/test_lifetimes.py"]
        out = run(PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests, cwd=dest)
        last = out.strip().splitlines()[-1]
        print("   " + last)
        if " passed" not in last:
            raise SystemExit(f"FAILED: no test ran in {dest}")
    nvcc = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
    )
    if nvcc is None:
        print("\n== no nvcc: the compile-only CUDA build is skipped")
    else:
        _compile_cuda(dest, name, ops, nvcc)
    with step("  remove the Triton op (tools/remove_op.py): nothing names it"):
        run(PY, "tools/remove_op.py", "tri_fma", cwd=dest)
        left = run("git", "grep", "-l", "tri_fma", cwd=dest, check=False)
        assert not left.strip(), f"files still naming tri_fma: {left}"
        check_triton_build(dest)  # commented out again with the last Triton kernel


def _compile_cuda(dest: Path, name: str, ops: list[str], nvcc: str) -> None:
    with step("  compile-only CUDA build of the new ops' kernels, one architecture (75)"):
        build = dest / "build" / "cuda75"
        run(
            "cmake",
            "-S",
            dest,
            "-B",
            build,
            "-G",
            "Ninja",
            f"-D{name.upper()}_CUDA=ON",
            f"-D{name.upper()}_TRITON=ON",
            "-DCMAKE_CUDA_ARCHITECTURES=75",
            f"-DCMAKE_CUDA_COMPILER={nvcc}",
            f"-DPython_EXECUTABLE={PY}",
            "-DSKBUILD_PROJECT_VERSION=0.1.0",
            cwd=dest,
        )
        targets = [f"CMakeFiles/{name}.dir/kernels/{op}/{op}.cu.o" for op in ops if op != "tri_fma"]
        targets.append(f"CMakeFiles/{name}.dir/kernels/tri_fma/tri_fma.cu.o")
        run("cmake", "--build", build, "--target", *targets, cwd=dest)


def _edit(path: Path, line: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[line] = text
    path.write_text("\n".join(lines) + "\n")


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text + "\n")


def _commit(repo: Path, message: str) -> None:
    identity = ["-c", "user.name=template check", "-c", "user.email=check@localhost"]
    run("git", *identity, "add", "-A", cwd=repo)
    run("git", *identity, "commit", "-q", "--no-verify", "-m", message, cwd=repo)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument(
        "--only", choices=["generate", "combinations", "evolve", "update", "scaffold"], action="append"
    )
    args = parser.parse_args(argv)
    work: Path = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    flows = {
        "generate": flow_generate,
        "combinations": flow_combinations,
        "update": flow_update,  # before the PyTorch and JAX installs of the scaffold flow
        "evolve": flow_evolve,
        "scaffold": flow_scaffold,
    }
    for name in args.only or flows:
        flows[name](work)
    print("\n== template checks passed")
    for title, took in STEPS:
        print(f"   {took:6.0f} s  {title}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
