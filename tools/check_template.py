#!/usr/bin/env python3
"""The template's own CI (nox -s template): the flows of docs/template.md, run as a user runs them.

    python tools/check_template.py WORKDIR [--only generate|combinations|evolve|update|scaffold] [--jobs N]
    python tools/check_template.py WORKDIR --only release   (nox -s template_release)
    python tools/check_template.py WORKDIR --only names     (CI's first stage: seconds, not minutes)

Each flow generates libraries (built CPU-only) in WORKDIR/<flow> and checks them with their own
noxfile (docs/template.md says what). They share nothing: a process each, --jobs at once (cores).
The release flow, not among the default ones, builds a generated library's release wheel with
the CUDA toolchains and sysroot this checkout's release sessions fetched.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import yaml  # pre-commit's own dependency
from remove_op import declared_ops

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tools" / "template_check"  # what an author writes after scaffolding
PY = sys.executable
# A name much longer than the template's: every line that names the library grows with it.
LONG_NAME = "acme_fused_attention_kernels"
# The library's own checks that need no build: every session, path and docs region its docs,
# .ci/run and workflows name exists, every number its docs state is rendered or sourced.
STATIC_CHECKS = "session or path_named or literalinclude or workflow_parser or number or rendered"
LIBRARIES = [("my_kernels", []), ("rms_kernels", ["rms_norm", "l2_norm"])]  # flow_generate's


def run(*cmd: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None, check: bool = True) -> str:
    print(f"  $ {' '.join(map(str, cmd))}  [in {cwd}]", flush=True)
    env = {**os.environ, **(env or {})}
    out = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0 and check:
        print(out.stdout[-6000:])
        raise SystemExit(f"FAILED (exit {out.returncode}): {' '.join(map(str, cmd))}")
    return out.stdout


@contextlib.contextmanager
def step(title: str) -> Iterator[None]:
    """Prints the step and, when it passes, its duration."""
    print(f"\n== {title}", flush=True)
    start = time.monotonic()
    yield
    print(f"   ok ({time.monotonic() - start:.0f} s)", flush=True)


def generate(name: str, dest: Path, *extra: str, template: Path = ROOT) -> None:
    run(PY, template / "tools" / "new_library.py", name, "--dest", dest, "--force", *extra, cwd=template)
    log = run("git", "log", "--oneline", cwd=dest).splitlines()
    assert len(log) == 1, f"{dest}: expected one initial commit, got {log}"
    assert (dest / ".copier-answers.yml").is_file(), "no .copier-answers.yml"
    text = (dest / "README.md").read_text() + (dest / "CHANGELOG.md").read_text()
    for phrase in ("fork it", "starter repository", "scale_lib", "## 0."):
        assert phrase not in text, f"{dest}: README/CHANGELOG still say {phrase!r}"
    assert not (dest / "docs" / "_static" / "perf").exists(), "template results copied"
    for machinery in ("new_library.py", "check_template.py", "template_check"):
        assert not (dest / "tools" / machinery).exists(), f"template machinery tools/{machinery} copied"


def check(name: str, dest: Path, *, docs: bool = True) -> None:
    """The library's own CI sessions, through its own tools/dev.py and noxfile, against a
    CPU-only build: lint, docs (-W) and tests_numpy (every framework: flow_scaffold)."""
    env = {f"{name.upper()}_CUDA": "OFF"}
    run(PY, "tools/dev.py", "lint", *(["docs"] if docs else []), cwd=dest, env=env)
    pytest = ["-q", "-x", "-p", "no:cacheprovider"]
    passed(run(PY, "tools/dev.py", "tests_numpy", "--", *pytest, cwd=dest, env=env), dest)


def passed(out: str, dest: Path) -> None:
    summary = [line.strip() for line in out.splitlines() if " passed" in line or " failed" in line]
    print("   " + (summary[-1] if summary else "(no summary)"))
    if not summary or " passed" not in summary[-1]:
        raise SystemExit(f"FAILED: no test ran in {dest}")


def template_ops(but: str = "") -> list[str]:
    return [op for op in declared_ops() if op != but]


def build_requires(dest: Path) -> list[str]:
    """What building the library needs: its build system's requirements and scikit-build's."""
    config = tomllib.loads((dest / "pyproject.toml").read_text())
    triton = config["tool"]["scikit-build"].get("build", {}).get("requires", [])  # with Triton kernels
    return [*config["build-system"]["requires"], *triton]


def check_triton_build(dest: Path) -> None:
    """Triton is a build requirement exactly while the library has a Triton kernel."""
    kernels = sorted(p.name for p in (dest / "kernels").glob("*/*.py") if p.parent.name in (p.stem, "triton"))
    required = any(r.startswith("triton") for r in build_requires(dest))
    assert required == bool(kernels), f"{dest.name}: Triton kernels {kernels}, Triton required: {required}"


def check_names(dest: Path, kept: set[str]) -> None:
    """Nothing in the library names a template op it does not have (another module's function of
    the same name, such as NumPy's `np.cumsum` beside the `cumsum` example op, is not the op)."""
    for op in sorted(set(template_ops()) - kept):
        own = re.compile(rf"(?<![.\w]){re.escape(op)}\b")
        found = run("git", "grep", "-n", "-w", op, cwd=dest, check=False).splitlines()
        left = "\n".join(line for line in found if own.search(line.split(":", 2)[-1]))
        assert not left, f"{dest.name}: files still naming {op}, which it does not have:\n{left}"


def flow_generate(work: Path) -> None:
    for name, ops in LIBRARIES:
        with step(f"generate {name} with --ops {','.join(ops) or '(none: scale only)'}"):
            generate(name, work / name, *(["--ops", ",".join(ops)] if ops else []))
            assert all((work / name / "tests" / f"test_{op}.py").is_file() for op in ("scale", *ops))
            check_names(work / name, {"scale", *ops})
            check_triton_build(work / name)
        with step("  its lint, docs and tests (NumPy)"):
            check(name, work / name)
        shutil.rmtree(work / name / ".nox")  # a CI disk holds one library's environments, not three


def flow_names(work: Path) -> None:
    """The quick check CI runs first: a scale-only library names no other op (flow_generate
    checks it again, among the rest)."""
    with step("generate my_kernels (scale only); no file names an op it lacks"):
        generate("my_kernels", work / "my_kernels")
        check_names(work / "my_kernels", {"scale"})


def flow_combinations(work: Path) -> None:
    """Each example op alone: a name left dangling (an op's name in a shared file or in another
    op's) shows in every library without that op."""
    choices = [op for op in template_ops(but="scale") if [op] not in [ops for _, ops in LIBRARIES]]
    with step(f"generate {len(choices)} more op choices; names, lint, static checks"):
        for op in choices:
            dest = work / "choice"
            generate("choice_kernels", dest, "--ops", op)
            check_names(dest, {"scale", op})
            check_triton_build(dest)
            # The Python lint (what removing an op can break: an import left unused, a gap).
            run(PY, "-m", "ruff", "check", "-q", ".", cwd=dest)
            run(PY, "-m", "ruff", "format", "-q", "--check", ".", cwd=dest)
            tests = ["tests/test_docs.py", "-k", STATIC_CHECKS]
            run(PY, "-m", "pytest", "-q", "--noconftest", "-p", "no:cacheprovider", *tests, cwd=dest)
            shutil.rmtree(dest)


def flow_evolve(work: Path) -> None:
    """The every-op library with the long name: the docs' ops added, two examples copied, one removed."""
    name, dest, new_op = LONG_NAME, work / LONG_NAME, [PY, "tools/new_op.py"]
    with step(f"generate {name} with every op"):
        generate(name, dest, "--ops", ",".join(template_ops(but="scale")))
        check_triton_build(dest)
    with step(f"{name}: add silu_mul (its documented vjp), prefix_sum, cumprod (scans), clamp_add (custom)"):
        run(*new_op, "silu_mul", "--inputs", "x,y", cwd=dest)
        apply_edits(dest, name, "silu_mul")
        run(*new_op, "prefix_sum", "--kind", "scan", cwd=dest)
        check_scan_page(dest, name)
        run(*new_op, "cumprod", "--kind", "scan", "--scan-op", "prod", cwd=dest)
        run(*new_op, "clamp_add", "--inputs", "a,b", "--attrs", "limit:float", "--kind", "custom", cwd=dest)
    with step("  lint holds the scaffolds' notes until the author has been through them"):
        finish_scaffolds(dest)
    with step(f"{name}: copy the NVRTC and the reduction examples (new_op.py --like softmax, rms_norm)"):
        run(*new_op, "fast_softmax", "--like", "softmax", cwd=dest)
        run(*new_op, "my_norm", "--like", "rms_norm", cwd=dest)
    with step("  remove l2_norm (tools/remove_op.py), commit"):
        run(PY, "tools/remove_op.py", "l2_norm", cwd=dest)
        commit(dest, "silu_mul, prefix_sum, cumprod, clamp_add, fast_softmax, my_norm; without l2_norm")
        assert "l2_norm" not in (dest / ".copier-answers.yml").read_text()
        check_names(dest, set(template_ops(but="l2_norm")))
        left = run("git", "grep", "-n", "-w", "l2_norm", cwd=dest, check=False)
        assert not left.strip(), f"{name}: files still naming l2_norm:\n{left}"
    with step("  its lint, docs and tests (NumPy)"):
        check(name, dest)
    shutil.rmtree(dest / ".nox")


def apply_edits(dest: Path, lib: str, what: str) -> None:
    """The edits ``what`` of tools/template_check/edits.yml, in library ``lib``."""
    for edit in yaml.safe_load((DATA / "edits.yml").read_text())[what]:
        path = dest / edit["path"].replace("scale_lib", lib)
        new = edit.get("new", "").replace("scale_lib", lib)
        text, lines = path.read_text(), path.read_text().splitlines(keepends=True)
        if "line" in edit:
            lines[edit["line"]] = new + "\n"
            text = "".join(lines)
        elif "append" in edit:
            text += edit["append"] + "\n"
        else:
            old = edit["old"].replace("scale_lib", lib)
            assert old in text, f"{path}: text {old!r} not found"
            text = text.replace(old, new, 1)
        path.write_text(text)


def finish_scaffolds(dest: Path) -> None:
    """The lint's scaffold-notes hook fails on what tools/new_op.py left for the author (each
    `TODO(author)` note, the README's op table among them); the author's pass, here the notes
    deleted (the pattern is the hook's own) and the placeholder math kept, clears it."""
    config = yaml.safe_load((dest / ".pre-commit-config.yaml").read_text())
    hooks = [h for r in config["repos"] for h in r["hooks"] if h["id"] == "scaffold-notes"]
    entry, exclude = hooks[0]["entry"], hooks[0].get("exclude", "^$")
    hook = ["pre-commit", "run", "scaffold-notes", "--all-files"]
    hook = subprocess.run(hook, cwd=dest, capture_output=True, text=True)
    assert hook.returncode != 0, hook.stdout + hook.stderr
    for path in run("git", "grep", "--untracked", "-l", "-E", entry, cwd=dest).split():
        if not re.search(exclude, path):  # the hook's own exceptions (the scaffolds' templates)
            note = re.compile(f"(?:{entry}) ?", re.M)  # and the space after it
            text = note.sub("", (dest / path).read_text())
            (dest / path).write_text(text)
    run("pre-commit", "run", "scaffold-notes", "--all-files", cwd=dest)


def check_scan_page(dest: Path, name: str) -> None:
    """docs/scan.md shows what new_op.py prefix_sum --kind scan wrote: each of its blocks marked as
    written by new_op.py is in the scaffolded files as it is on the page."""
    page = (dest / "docs" / "scan.md").read_text()
    files = (f"python/{name}/ops/prefix_sum.py", "tests/test_prefix_sum.py")
    written = "".join((dest / file).read_text() for file in files)
    marked = r"<!-- doc-test: skip: [^>]*new_op\.py writes[^>]*-->\n```python\n(.*?)```"
    blocks = re.findall(marked, page, re.S)
    assert len(blocks) >= 2, "docs/scan.md: no blocks of what new_op.py writes"
    for block in blocks:
        assert block in written, f"docs/scan.md shows code new_op.py no longer writes:\n{block}"


def flow_update(work: Path) -> None:
    template, dest = work / "template", work / "updated"
    with step("a template clone; a library generated from its last commit with ops.py and kernels/<op>.cu"):
        shutil.rmtree(template, ignore_errors=True)
        run("git", "clone", "-q", ROOT, template)
        if run("git", "status", "--porcelain", cwd=ROOT).strip():
            # Uncommitted template changes belong to the version under test: commit them there.
            run("bash", "-c", f"git -C {ROOT} diff HEAD --binary | git apply --index", cwd=template)
            commit(template, "uncommitted changes of the checkout under test")
        # The commit that made each op a module of ops/ and a folder of kernels/ (the last to touch
        # ops.py), and the one before it.
        moved = run("git", "rev-list", "-1", "HEAD", "--", "python/scale_lib/ops.py", cwd=template).strip()
        generate("my_kernels", dest, "--vcs-ref", f"{moved}^", template=template)
    with step("the template moves on: a kernel and a shared header change upstream"):
        apply_edits(template, "scale_lib", "upstream")
        commit(template, "upstream change")
    with step("the library edits a kernel, the shared header and scale's declaration, adds an op, commits"):
        apply_edits(dest, "my_kernels", "library")
        run(PY, "tools/new_op.py", "own_op", "--attrs", "alpha:float", cwd=dest)
        commit(dest, "library edits")
    with step("update the library to the template's newest commit (tools/update_from_template.py)"):
        # copier's migration resolves what the template now derives (the library's tool is older).
        run(PY, "tools/update_from_template.py", "HEAD", cwd=dest)
        for path, texts in yaml.safe_load((DATA / "edits.yml").read_text())["updated"].items():
            text = (dest / path.replace("scale_lib", "my_kernels")).read_text()
            assert all(t in text for t in texts), f"{path}: not all of {texts} in\n{text[:600]}"
        for moved in ("kernels/scale.cu", "python/my_kernels/ops.py"):  # each op's files are its folder's
            assert not (dest / moved).exists(), f"{moved} left beside the op's folder and module"
        assert not list(dest.rglob("*.rej")), "update left rejected hunks"
        conflicts = run("git", "grep", "-l", "-e", "^<<<<<<< ", cwd=dest, check=False).split()
        assert not conflicts, f"update left conflicts in {conflicts}"
        commit(dest, "update from the template")
    with step("  the updated library's lint and tests"):
        finish_scaffolds(dest)
        check("my_kernels", dest, docs=False)


def flow_scaffold(work: Path) -> None:
    name, origin, dest = "fastops", work / "scaffold_origin", work / "fastops"
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
        attrs = "alpha:float,negate:bool"
        run(*new_op, "wsum", "--inputs", "a,b", "--attrs", attrs, "--kind", "scan", cwd=dest)
        run(*new_op, "run_prod", "--kind", "scan", "--scan-op", "prod", cwd=dest)
    with step("scaffold a Triton op (--lang triton) with a float, an int and a bool attribute"):
        check_triton_build(dest)  # none yet: Triton is no build requirement
        attrs = "alpha:float,times:int,negate:bool"
        run(*new_op, "tri_fma", "--inputs", "a,b", "--attrs", attrs, "--lang", "triton", cwd=dest)
        check_triton_build(dest)  # restored by new_op.py
    with step("silu_mul and gelu_tanh as a user writes them (math, reference, vjp)"):
        run(*new_op, "silu_mul", "--inputs", "x,y", cwd=dest)
        apply_edits(dest, name, "silu_mul")
        apply_edits(dest, name, "gelu_tanh")
        gradients = (DATA / "test_silu_mul_gradients.py").read_text().replace("scale_lib", name)
        (dest / "tests/test_silu_mul_gradients.py").write_text(gradients)
        finish_scaffolds(dest)
        # The user formats what they wrote (the formatters fix it; the lint step below checks).
        subprocess.run(["pre-commit", "run", "--all-files"], cwd=dest, capture_output=True, check=False)
    with step("  lint of the library with its new ops"):
        run("pre-commit", "run", "--all-files", "--show-diff-on-failure", cwd=dest)
    with step("  CPU-only build; the new ops' tests with NumPy, PyTorch, JAX and Paddle"):
        # The frameworks, and what the CUDA build below needs, in an environment of this flow's own.
        venv, env = work / "venv", {f"{name.upper()}_CUDA": "OFF"}
        run(PY, "-m", "venv", "--clear", venv)
        torch, project = os.environ.get("TORCH_SPEC", "torch"), f"{dest}[test,jax,paddle,array-api]"
        run(venv / "bin" / "pip", "install", "-q", torch, project, *build_requires(dest), cwd=dest, env=env)
        tests = [f"tests/test_{op}.py" for op in [*ops, "silu_mul_gradients", "signatures", "declared_ops"]]
        tests += ["tests/test_bad_inputs.py", "tests/test_hostile.py", "tests/test_lifetimes.py"]
        pytest = [venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests]
        passed(run(*pytest, cwd=dest), dest)
    nvcc = shutil.which("nvcc") or next(iter(Path("/usr/local/cuda/bin").glob("nvcc")), None)
    if nvcc is None:
        print("\n== no nvcc: the compile-only CUDA build is skipped")
    else:
        with step("  compile-only CUDA build of the new ops' kernels, one architecture (75)"):
            build, up = dest / "build" / "cuda75", name.upper()
            options = [f"-D{up}_CUDA=ON", f"-D{up}_TRITON=ON", "-DCMAKE_CUDA_ARCHITECTURES=75"]
            options += [f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DPython_EXECUTABLE={venv / 'bin' / 'python'}"]
            options += ["-DSKBUILD_PROJECT_VERSION=0.1.0"]
            run("cmake", "-S", dest, "-B", build, "-G", "Ninja", *options, cwd=dest)
            targets = [f"CMakeFiles/{name}.dir/kernels/{op}/{op}.cu.o" for op in ops]  # tri_fma's: Triton's
            run("cmake", "--build", build, "--target", *targets, cwd=dest)
    with step("  remove the Triton op (tools/remove_op.py): nothing names it"):
        run(PY, "tools/remove_op.py", "tri_fma", cwd=dest)
        left = run("git", "grep", "-l", "tri_fma", cwd=dest, check=False)
        assert not left.strip(), f"files still naming tri_fma: {left}"
        check_triton_build(dest)  # commented out again with the last Triton kernel
    shutil.rmtree(venv)


def flow_release(work: Path) -> None:
    """A library as generated passes its own release session: the wheel holds the architectures its
    README states (rendered from what its kernels build), and the session leaves its files as
    committed (the release summary the checks write is the one it was generated with)."""
    dest = work / "release_kernels"
    with step("generate release_kernels (scale only)"):
        generate("release_kernels", dest)
    for fetched in (".cuda", ".sysroot"):  # the toolchains are the template's; the fork's are the same
        if (ROOT / fetched).is_dir():
            (dest / fetched).symlink_to(ROOT / fetched, target_is_directory=True)
    with step("  its build_release (CUDA 12.4 and 13.0, every default architecture)"):
        run(PY, "tools/dev.py", "build_release", cwd=dest)
        changed = run("git", "diff", "--name-only", cwd=dest).split()
        assert not changed, f"build_release changed committed files: {changed}"


def commit(repo: Path, message: str) -> None:
    identity = ["-c", "user.name=template check", "-c", "user.email=check@localhost"]
    run("git", *identity, "add", "-A", cwd=repo)
    run("git", *identity, "commit", "-q", "--no-verify", "-m", message, cwd=repo)


def main(argv: list[str]) -> int:
    flows = ["scaffold", "evolve", "generate", "update", "combinations"]  # the longest first
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--only", choices=[*flows, "names", "release"], action="append")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="flows at once")
    args = parser.parse_args(argv)
    work, chosen = args.workdir.resolve(), args.only or flows
    work.mkdir(parents=True, exist_ok=True)
    if len(chosen) == 1:
        globals()[f"flow_{chosen[0]}"](work / chosen[0])
        return 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:  # a process a flow
        command = [PY, "-u", __file__, work, "--only"]
        done = pool.map(lambda flow: subprocess.run([*command, flow], capture_output=True, text=True), chosen)
        runs = dict(zip(chosen, done, strict=True))
    for flow, out in runs.items():
        verdict = "FAILED" if out.returncode else "passed"
        print(f"\n===== flow {flow}: {verdict}\n{out.stdout}{out.stderr}", end="")
    failed = [flow for flow, out in runs.items() if out.returncode]
    print(f"\n== template checks {'FAILED: ' + ', '.join(failed) if failed else 'passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
