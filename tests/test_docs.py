"""The docs say only what the code does: every region they include exists, every Python or
shell snippet is run here or marked with the reason it is not, and every path, nox session,
``tools/dev.py`` session and ``scale_lib.<name>`` they name exists.

A snippet is a fenced block of README.md, CONTRIBUTING.md or docs/ (directives such as
``{literalinclude}`` excepted: they show real code). The line before its fence says what this
test does with it:

    <!-- doc-test: run -->                  run it (Python: a fresh interpreter; shell: bash -e)
    <!-- doc-test: run; setup: CODE -->     run CODE first (the names a fragment assumes)
    <!-- doc-test: gpu -->                  run it where a CUDA GPU is visible (else skipped)
    <!-- doc-test: skip: REASON -->         not run, for REASON (a build, a GPU fleet, ...)

``pycon`` blocks (``>>>`` prompts with the output below them) are run by doctest: the output
shown is the output checked. A Python or shell snippet without a mark fails the test. Blocks
inside HTML comments (the README's fork-only text) are not rendered and not checked here; a
generated library, where they are, checks them itself.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The pages people read: not the docs build's output (_build) or its generated includes.
PAGES = [p for p in (ROOT / "README.md", ROOT / "CONTRIBUTING.md") if p.is_file()] + sorted(
    p for p in DOCS.rglob("*.md") if not {"_build", "_generated"} & set(p.parts)
)
INCLUDE = re.compile(r"```\{literalinclude\} (?P<path>\S+)\n(?P<options>(?::[^\n]*\n)*)", re.MULTILINE)
FENCE = re.compile(r"^```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARK = re.compile(r"<!-- doc-test: (?P<what>run|gpu|skip: [^>]+?)(?:; setup: (?P<setup>.+?))? -->\s*$")
COMMENT = re.compile(r"<!--(?! doc-test:).*?-->", re.DOTALL)
PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell", "console"}


def _rendered(text: str) -> str:
    """The page as rendered: HTML comments (but the doc-test marks) blanked, lines kept."""
    return COMMENT.sub(lambda m: "\n" * m.group().count("\n"), text)


def _snippets():
    for page in PAGES:
        text = _rendered(page.read_text())
        for m in FENCE.finditer(text):
            lang = m.group("lang")
            if lang.startswith("{") or lang not in PYTHON | SHELL | {"pycon"}:
                continue
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            rel = page.relative_to(ROOT)
            yield pytest.param(page, line, lang, m.group("body"), mark, id=f"{rel}:{line}")


SNIPPETS = list(_snippets())


def _run_python(code: str, where: str) -> None:
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", child.stderr)
    if child.returncode and missing and missing.group(1).split(".")[0] != "scale_lib":
        pytest.skip(f"{where} needs {missing.group(1)}, which is not installed")
    assert child.returncode == 0, f"{where} failed:\n{child.stderr[-3000:]}"


def _cuda_visible() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


@pytest.mark.parametrize(("page", "line", "lang", "body", "mark"), SNIPPETS)
def test_snippet_runs_or_says_why_not(page: Path, line: int, lang: str, body: str, mark) -> None:
    where = f"{page.relative_to(ROOT)}:{line}"
    if lang == "pycon":
        parser = doctest.DocTestParser()
        test = parser.get_doctest(body, {}, where, str(page), line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        assert runner.failures == 0, f"{where}: the output shown is not the output"
        return
    assert mark is not None, (
        f"{where}: a {lang} snippet with no doc-test mark on the line before its fence "
        "(run / gpu / skip: REASON; see tests/test_docs.py)"
    )
    what = mark.group("what")
    if what.startswith("skip: "):
        assert len(what) > len("skip: ") + 10, f"{where}: say why it is not run"
        pytest.skip(f"not run: {what[len('skip: ') :]}")
    if what == "gpu" and not _cuda_visible():
        pytest.skip(f"{where} needs a CUDA GPU")
    code = (mark.group("setup") or "") + "\n" + body
    if lang in PYTHON:
        _run_python(code, where)
    else:
        child = subprocess.run(["bash", "-ec", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert child.returncode == 0, f"{where} failed:\n{child.stdout[-1500:]}\n{child.stderr[-1500:]}"


# -- included regions ---------------------------------------------------------------------------
def _includes():
    for page in sorted(DOCS.rglob("*.md")):
        for m in INCLUDE.finditer(page.read_text()):
            options = dict(re.findall(r':([\w-]+): "?(.*?)"?\n', m.group("options")))
            rel = page.relative_to(DOCS)
            yield pytest.param(page, m.group("path"), options, id=f"{rel}:{m.group('path')}")


@pytest.mark.skipif(not DOCS.is_dir(), reason="docs/ is not part of this checkout")
@pytest.mark.parametrize(("page", "path", "options"), list(_includes()))
def test_literalinclude_regions_exist(page: Path, path: str, options: dict[str, str]) -> None:
    source = (page.parent / path).resolve()
    assert source.is_file(), f"{page.name} includes missing file {path}"
    text = source.read_text()
    for key in ("start-after", "end-before"):
        if key in options:
            assert text.count(options[key]) == 1, f"{path}: marker {options[key]!r} must appear once"
    if "pyobject" in options:  # a function or class, or a method as Class.method
        *owner, name = options["pyobject"].split(".")
        if owner:
            assert re.search(rf"^class {owner[0]}\b", text, re.MULTILINE), options
            text = text[re.search(rf"^class {owner[0]}\b.*\n", text, re.MULTILINE).end() :]  # its body
            text = text[: m.start()] if (m := re.search(r"^\S", text, re.MULTILINE)) else text
        assert re.search(rf"^\s*(def|class) {name}\b", text, re.MULTILINE), options
    if "start-after" in options and "end-before" in options:
        region = text.split(options["start-after"], 1)[1].split(options["end-before"], 1)[0]
        assert region.strip(), f"{path}: region {options['start-after']} is empty"


# -- paths and sessions named ------------------------------------------------------------------
PATH = re.compile(
    r"(?<![\w./-])((?:tests|tools|benchmarks|examples|kernels|bindings|include|docs)/[\w./-]*\w)"
)
NOX = re.compile(r"\bnox -s ((?:[\w-]+,?)+)(?![\w$<{-])")  # not a placeholder: tests_${{ ... }}
DEV = re.compile(r"\btools/dev\.py((?: [a-z][\w]*)+)")
NOXFILE = ROOT / "noxfile.py"


def _sessions() -> set[str]:
    """The sessions noxfile.py defines: decorated functions, and the per-framework ones."""
    text = NOXFILE.read_text()
    names = set(re.findall(r"@nox\.session\([^)]*\)\s*\ndef (\w+)\(", text))
    names |= set(re.findall(r"@nox\.session\([^)]*name=\"(\w+)\"", text))
    frameworks = re.search(r"^FRAMEWORKS = \{(.*?)^\}", text, re.MULTILINE | re.DOTALL)
    if frameworks and 'name=f"tests_{framework}"' in text:
        names |= {f"tests_{f}" for f in re.findall(r'^\s*"(\w+)":', frameworks.group(1), re.MULTILINE)}
    return names


WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _named(pattern: re.Pattern[str]):
    for page in [*PAGES, ROOT / ".ci" / "run", *WORKFLOWS]:
        if not page.is_file():
            continue
        text = _rendered(page.read_text())
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            yield f"{page.relative_to(ROOT)}:{line}", m.group(1)


@pytest.mark.skipif(not NOXFILE.is_file(), reason="noxfile.py is not part of this checkout")
def test_every_session_named_exists() -> None:
    sessions = _sessions()
    assert {"tests", "lint", "docs"} <= sessions, sorted(sessions)  # the parser reads the noxfile
    missing = []
    for where, names in _named(NOX):
        missing += [f"{where}: nox -s {n}" for n in names.split(",") if n not in sessions and not n.isupper()]
    for where, args in _named(DEV):
        first = args.split()[0]
        if first not in sessions | {"-h", "--help"} and not first.isupper():  # NAME: a placeholder
            missing.append(f"{where}: tools/dev.py {first}")
    assert not missing, "sessions the docs name that noxfile.py does not define:\n" + "\n".join(missing)


# A workflow's nox commands: options may come before -s; a matrix value is written @KEY@ here.
NOX_RUN = re.compile(r"\bnox\b[^\n#]*?\s-s\s+((?:[\w@-]+,?)+)")
MATRIX_LIST = re.compile(r"^\s+([\w-]+):\s*\[([^\]\n]*)\]", re.MULTILINE)
PLACEHOLDER = re.compile(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}")


def _workflow_commands(text: str) -> str:
    """The workflow without its comments and step names (prose), matrix values as @KEY@."""
    lines = [
        "" if re.match(r"\s*(#|-?\s*name:)", line) else PLACEHOLDER.sub(r"@\1@", line)
        for line in text.splitlines()
    ]
    return "\n".join(lines)


def _expanded(name: str, lists: dict[str, list[str]]) -> list[str]:
    """Every session name that one with @KEY@ (a matrix value) stands for."""
    m = re.search(r"@([\w-]+)@", name)
    if m is None:
        return [name]
    values = lists.get(m.group(1))
    assert values, f"{name}: no matrix list {m.group(1)!r} in the workflow"
    return [n for v in values for n in _expanded(name[: m.start()] + v + name[m.end() :], lists)]


def _workflow_sessions(text: str) -> list[tuple[int, str]]:
    """(line, session) of every nox command a workflow runs, for every value of its matrix."""
    text = _workflow_commands(text)
    lists = {
        key: [v.strip().strip("'\"") for v in values.split(",") if v.strip()]
        for key, values in MATRIX_LIST.findall(text)
    }
    return [
        (text.count("\n", 0, m.start()) + 1, name)
        for m in NOX_RUN.finditer(text)
        for names in m.group(1).split(",")
        if names
        for name in _expanded(names, lists)
    ]


@pytest.mark.skipif(not NOXFILE.is_file(), reason="noxfile.py is not part of this checkout")
def test_every_session_a_workflow_runs_exists() -> None:
    # What GitHub runs on a push: each step's nox command, for every value of its job's matrix
    # (a session the noxfile lacks fails that job, e.g. one a generated library does not have).
    sessions, missing, found = _sessions(), [], 0
    for workflow in WORKFLOWS:
        for line, name in _workflow_sessions(workflow.read_text()):
            found += 1
            if name not in sessions:
                missing.append(f"{workflow.relative_to(ROOT)}:{line}: nox -s {name}")
    assert found or not WORKFLOWS, "no nox command found in the workflows: the parser is stale"
    assert not missing, "sessions the workflows run that noxfile.py does not define:\n" + "\n".join(missing)


def test_workflow_parser_sees_every_session() -> None:
    # The parser behind the check above, on a job it must read: options before -s, a matrix
    # value in the name, a session list, and prose (comments, step names) that runs nothing.
    job = """
    strategy:
      matrix:
        python: ["3.11", "3.12"]
        framework: [numpy, torch]
    steps:
      # nox -s in_a_comment
      - name: nox -s in_a_name
        run: nox --force-python ${{ matrix.python }} -s tests_${{ matrix.framework }}
      - run: |
          nox -s lint,docs -- -x
"""
    assert _workflow_sessions(job) == [
        (9, "tests_numpy"),
        (9, "tests_torch"),
        (11, "lint"),
        (11, "docs"),
    ]


def _ignored_outputs() -> list[str]:
    """Folders the project writes into (git-ignored build and benchmark output)."""
    gitignore = ROOT / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.is_file() else []
    return [line.strip("/") for line in lines if line.startswith("/") and line.endswith("/")]


def _exists(path: str, page_text: str) -> bool:
    if (ROOT / path).exists() or (DOCS / path).exists() or (DOCS / f"{path}.md").exists():
        return True
    if any(path == out or path.startswith(out + "/") for out in _ignored_outputs()):
        return True
    # A file the page has the reader create (tools/new_op.py NAME makes tests/test_NAME.py).
    return any(name in path for name in re.findall(r"new_op\.py (\w+)", page_text))


def test_every_path_named_exists() -> None:
    missing = []
    for page in [*PAGES, ROOT / ".ci" / "run", *WORKFLOWS]:
        if not page.is_file():
            continue
        text = _rendered(page.read_text())
        for m in PATH.finditer(text):
            after = text[m.end() : m.end() + 2]
            if after[:1] in ("<", "{", "*") or after in ("/<", "/{") or _exists(m.group(1), text):
                continue  # a placeholder (tests/test_<op>.py), or there
            missing.append(f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(1)}")
    assert not missing, "paths the docs name that do not exist:\n" + "\n".join(missing)


LIBRARY_NAME = re.compile(r"(?<![\w.])scale_lib\.([A-Za-z_]\w*)")


def test_every_library_name_the_docs_call_exists() -> None:
    # A page that calls scale_lib.NAME (in prose, a snippet or a GPU-only example) names what the
    # package has: a generated library without an op keeps no call of it.
    import importlib.util

    import scale_lib

    missing = []
    for page in [*PAGES, *sorted((ROOT / "examples").glob("*.py"))]:
        text = _rendered(page.read_text())
        for m in LIBRARY_NAME.finditer(text):
            name = m.group(1)
            if hasattr(scale_lib, name) or importlib.util.find_spec(f"scale_lib.{name}") is not None:
                continue
            line = text.count("\n", 0, m.start()) + 1
            missing.append(f"{page.relative_to(ROOT)}:{line}: scale_lib.{name}")
    assert not missing, "names of the package the docs use that it does not have:\n" + "\n".join(missing)


def test_unmarked_snippets_fail() -> None:
    # The mark is what keeps a snippet honest: the parser must see a missing one.
    page = "text\n\n```python\nprint(1)\n```\n"
    (m,) = list(FENCE.finditer(page))
    assert MARK.search(page[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]) is None
    assert MARK.search("<!-- doc-test: skip: needs a cluster of GPUs -->")
    setup = MARK.search("<!-- doc-test: run; setup: import numpy as np -->")
    assert setup is not None and setup.group("setup") == "import numpy as np"


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # Snippets run as a reader runs them: with no test-only settings.
    monkeypatch.delenv("SCALE_LIB_HYPOTHESIS_PROFILE", raising=False)
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")


# -- what belongs to one op: its files, never a block of a shared one ------------------------------
# The old markers of an op's part of a shared file; a shared file says the rule and lists the ops
# of a kind with a render span instead (<!-- render: ops linear -->).
OP_BLOCK = re.compile(
    r"<!-- /?op: \w+(?:, \w+)* -->|^[ \t]*(?:#|//) /?op: \w+(?:, \w+)*[ \t]*$", re.MULTILINE
)


def _remover() -> dict:
    import runpy

    return runpy.run_path(str(ROOT / "tools" / "remove_op.py"))


@pytest.mark.skipif(not (ROOT / "tools" / "remove_op.py").is_file(), reason="no tools/remove_op.py here")
def test_shared_files_hold_no_op_blocks_and_op_files_name_declared_ops() -> None:
    # tools/remove_op.py deletes an op's own files (named for it, or saying `op-file: <op>` in
    # their first lines) and cuts nothing out of shared files: a passage about one op in a
    # shared file would be left behind in a library without it.
    from scale_lib.ops import OPS

    remove = _remover()
    declared = {spec.name for spec in OPS}
    problems = []
    for path, text in remove["project_texts"]().items():
        where = path.relative_to(ROOT)
        if (
            path.suffix in {".md", ".py", ".h", ".cuh", ".cu", ".cc", ".yml", ".toml", ".txt"}
            or path.name == "run"
        ):
            problems += [f"{where}: op block {m.group(0).strip()!r}" for m in OP_BLOCK.finditer(text)]
        owners = remove["file_owners"](text)
        problems += [f"{where}: op-file of {n}, which the library lacks" for n in owners - declared]
    assert not problems, "move the passage into the op's own files, or list the ops with a render span:\n" + (
        "\n".join(problems)
    )


@pytest.mark.skipif(not (ROOT / "tools" / "remove_op.py").is_file(), reason="no tools/remove_op.py here")
def test_removing_an_op_removes_its_owned_files_and_answer() -> None:
    remove = _remover()
    assert remove["file_owners"]("# SPDX\n# op-file: foo, bar\n") == {"foo", "bar"}
    assert (
        remove["without_answer"]("_commit: x\nops: scale,foo,bar\n", "foo") == "_commit: x\nops: scale,bar\n"
    )


@pytest.mark.skipif(not (ROOT / "tools" / "render_docs.py").is_file(), reason="no tools/render_docs.py here")
def test_ops_spans_read_each_declaration_as_the_library_does() -> None:
    # render_docs reads the OpSpec calls as source (it runs where the library is not built):
    # each fact it reads agrees with the declarations the library registered.
    from scale_lib.ops import OPS

    facts = _renderer()
    public = [spec for spec in OPS if spec.public]
    runtime = {
        "all": lambda spec: True,
        "gradient": lambda spec: spec.vjp is not None,
        "forward": lambda spec: spec.jvp is not None or spec.linear,
        "linear": lambda spec: spec.linear,
        "data-sized": lambda spec: spec.output.allocated_by_library,
        "rows": lambda spec: any(i.rows for i in spec.inputs),
        "ndim": lambda spec: spec.inputs[0].min_ndim > 0,
        "workspace": lambda spec: spec.workspace is not None,
        "triton": lambda spec: spec.triton,
        "cpu": lambda spec: "cpu" in spec.devices,
        "sharded": lambda spec: spec.sharding is not None,
        "elementwise": lambda spec: spec.sharding == "elementwise",
        "rowwise": lambda spec: spec.sharding == "rows",
        "reduction": lambda spec: spec.sharding == "reduction",
    }
    assert set(runtime) == set(facts["FACTS"])

    def listed(names: list[str]) -> str:
        return ", ".join(f"`{n}`" for n in sorted(names)) or "none"

    for fact, holds in runtime.items():
        assert facts["render_ops"](fact) == listed([spec.name for spec in public if holds(spec)]), fact
        assert facts["render_ops"](f"!{fact}") == listed([spec.name for spec in public if not holds(spec)]), (
            fact
        )
    with pytest.raises(ValueError, match="unknown op fact 'fast'"):
        facts["render_ops"]("fast")


# template-only:begin
@pytest.mark.skipif(not (ROOT / "tools" / "new_library.py").is_file(), reason="no tools/new_library.py here")
def test_template_only_blocks_leave_one_blank_line() -> None:
    import runpy

    without = runpy.run_path(str(ROOT / "tools" / "new_library.py"))["without_template_only"]
    page = "a\n\n<!-- template-only -->\nthe template's\n<!-- /template-only -->\n\nb\n"
    assert without(page) == "a\n\nb\n"
    assert without("`a`<!-- template-only -->, `t`<!-- /template-only -->; b\n") == "`a`; b\n"
    jobs = "  bench:\n    run: a\n\n  # template-only:begin\n  template:\n    run: t\n"
    jobs += "  # template-only:end\n\n  docs:\n"
    assert without(jobs) == "  bench:\n    run: a\n\n  docs:\n"
    # A block with no blank line after it ends at its own end marker, not at a later block's.
    shared = "a()\n\n# template-only:begin\nt1()\n# template-only:end\nshared()\n\n"
    shared += "# template-only:begin\nt2()\n# template-only:end\n\nz\n"
    assert without(shared) == "a()\n\nshared()\n\nz\n"


# template-only:end


@pytest.mark.skipif(not (ROOT / "tools" / "remove_op.py").is_file(), reason="no tools/remove_op.py here")
def test_triton_build_requirement_follows_the_triton_kernels() -> None:
    # A library without a Triton kernel builds without Triton: remove_op.py comments the build
    # requirement out with the last Triton kernel, and new_op.py --lang triton restores it.
    import tomllib

    toggle = _remover()["with_triton_build"]
    text = (ROOT / "pyproject.toml").read_text()
    has_kernels = any(p.parent.name in (p.stem, "triton") for p in (ROOT / "kernels").glob("*/*.py"))

    def requires(t: str) -> list[str]:
        return tomllib.loads(t)["tool"]["scikit-build"].get("build", {}).get("requires", [])

    assert any("triton" in r for r in requires(text)) == has_kernels
    off, on = toggle(text, needed=False), toggle(text, needed=True)
    assert requires(off) == [] and any(r.startswith("triton") for r in requires(on))
    assert toggle(off, needed=True) == on and toggle(on, needed=False) == off


# -- the transformations table: every row held by a test ----------------------------------------
TRANSFORMATIONS = re.compile(r"<!-- transformations:begin -->(.*?)<!-- transformations:end -->", re.S)
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def test_every_transformation_row_names_a_test_that_exists() -> None:
    page = ROOT / "docs" / "guarantees.md"
    table = TRANSFORMATIONS.search(page.read_text())
    assert table is not None, "docs/guarantees.md has no transformations table"
    rows = [line for line in table.group(1).splitlines() if line.startswith("|") and "---" not in line][1:]
    assert rows, "the transformations table has no rows"
    problems = []
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        status, named = cells[-2], TEST_ID.search(cells[-1])
        if not (status.startswith(("works", "`TypeError`")) or "TypeError" in status):
            problems.append(f"row without a status of works/TypeError: {row}")
        if named is None:
            problems.append(f"row naming no test: {row}")
            continue
        path, name = ROOT / named.group(1), named.group(2)
        if not path.is_file() or not re.search(rf"^def {name}\(", path.read_text(), re.M):
            problems.append(f"row naming a test that does not exist: {named.group(0)}")
    assert not problems, "\n".join(problems)


# -- numbers in prose: each from its source -------------------------------------------------------
# A number a reader acts on (a size, a time, a ratio, a count of elements or threads, a version
# floor) is rendered from its source by tools/render_docs.py (<!-- render: ... --> spans: constants
# of the code, benchmark and check output, pyproject.toml and noxfile.py), or its paragraph, list
# item or table row says where it comes from: <!-- source: PATH --> (a file of the repository: a
# benchmark's JSON, a check's output), <!-- source: https://... --> (a vendor's documentation) or
# <!-- source: past run: WHAT --> (a run whose output the repository does not keep). Snippets and
# included code are checked above; spelled-out amounts ("a few minutes") are not numbers here.
_NUMBER = r"(?:\d+\^)?\d[\d,]*(?:\.\d+)*"
_RANGE = rf"{_NUMBER}(?:\s?(?:-|\u2013|to)\s?{_NUMBER})?"
_UNIT = (
    r"(?:[KMGT]i?B(?:/s)?|bytes?|ns|µs|us|ms|s|seconds?|minutes?|hours?|%|x(?!\s?\d)|\u00d7|elements?|threads?"
    r"|cores?|registers?|calls?|samples?|rounds?|packs?|blocks?|warps?)"
)
STATED = re.compile(
    rf"(?<![\w.^/-])(?:{_RANGE}(?: ?\n? *| ){_UNIT}(?!\w)|>=\s?{_NUMBER}|{_NUMBER}\+(?![\w+])"
    rf"|{_NUMBER},? (?:or|and) (?:newer|later))"
)
SOURCE = re.compile(r"<!-- source: (?P<what>.+?) -->", re.DOTALL)
BLOCK_START = re.compile(r"^\s*(?:\||[-*] |\d+\. |#)")


def _blocks(text: str):
    """(line, text) of each paragraph, list item, table row and heading of a page, fenced code
    blanked (its snippets are run or marked)."""
    text = FENCE.sub(lambda m: "\n" * m.group().count("\n"), text)
    text = INCLUDE.sub(lambda m: "\n" * m.group().count("\n"), text)
    block: list[str] = []
    start = 1
    for number, line in enumerate([*text.split("\n"), ""], 1):
        if not line.strip() or BLOCK_START.match(line):
            if any(b.strip() for b in block):
                yield start, "\n".join(block)
            block, start = ([line] if line.strip() else []), (number if line.strip() else number + 1)
        else:
            block.append(line)


def _unsourced(text: str, renderer: dict) -> tuple[list[tuple[int, str]], list[str]]:
    """(line, number) of each number stated without a source, and the bad source marks."""
    unsourced, bad = [], []
    for line, block in _blocks(text):
        marks = SOURCE.findall(block)
        if re.search(r"^ {0,3}<!-- source:", block, re.MULTILINE):
            bad.append(f"{line}: a source mark starts a line, which Markdown then reads as raw HTML")
        for what in marks:
            path = what.strip()
            if not (path.startswith(("https://", "past run: ")) or (ROOT / path.split("#")[0]).exists()):
                bad.append(f"{line}: source: {what} (no such file)")
        if marks:
            continue
        prose = renderer["SPAN"].sub(" ", block)
        prose = re.sub(r"<!--.*?-->", " ", prose, flags=re.DOTALL)
        unsourced += [(line, m.group()) for m in STATED.finditer(prose)]
    return unsourced, bad


def _renderer() -> dict:
    import runpy

    return runpy.run_path(str(ROOT / "tools" / "render_docs.py"))


@pytest.mark.skipif(not (ROOT / "tools" / "render_docs.py").is_file(), reason="no tools/render_docs.py here")
def test_every_number_stated_comes_from_its_source() -> None:
    renderer, problems = _renderer(), []
    for page in PAGES:
        where = page.relative_to(ROOT)
        unsourced, bad = _unsourced(page.read_text(), renderer)
        problems += [f"{where}:{line}: {number!r} has no source" for line, number in unsourced]
        problems += [f"{where}:{b}" for b in bad]
    assert not problems, (
        "numbers the docs state that no source backs (render them with tools/render_docs.py, or mark "
        "the paragraph <!-- source: PATH -->; see this test's comment):\n" + "\n".join(problems)
    )


@pytest.mark.skipif(not (ROOT / "tools" / "render_docs.py").is_file(), reason="no tools/render_docs.py here")
def test_every_rendered_number_is_current() -> None:
    renderer, problems = _renderer(), []
    for page in PAGES:
        for line, spec, shown, value in renderer["stale"](page.read_text()):
            problems.append(
                f"{page.relative_to(ROOT)}:{line}: {spec}: shows {shown!r}, the source gives {value!r}"
            )
    assert not problems, "stale numbers (python3 tools/render_docs.py renders them):\n" + "\n".join(problems)


@pytest.mark.skipif(not (ROOT / "tools" / "render_docs.py").is_file(), reason="no tools/render_docs.py here")
def test_number_check_sees_unsourced_numbers() -> None:
    # The check above on pages it must read: a number with a unit, a range, a floor; a rendered
    # number, a marked paragraph and a snippet, which pass.
    renderer = _renderer()
    page = (
        "Took 171 s on two cores; 1.5-5 µs a call.\n\nNeeds PyTorch >= 2.11, CUDA 12.0 or newer.\n\n"
        "From <!-- render: python -->3.11<!-- /render -->, fine.\n\n"
        "Ran at 808 GB/s.<!-- source: pyproject.toml -->\n\n"
        "- 12% slower\n- 3 µs <!-- source: past run: x -->\n\n"
        "```bash\nsleep 10 s\n```\n\nSee <!-- source: no/such/file.json --> 2x.\n"
    )
    unsourced, bad = _unsourced(page, renderer)
    assert [n for _, n in unsourced] == ["171 s", "1.5-5 µs", ">= 2.11", "12.0 or newer", "12%"]
    assert [line for line, _ in unsourced] == [1, 1, 3, 3, 9]
    assert len(bad) == 1 and "no/such/file.json" in bad[0]
    assert renderer["render"]("const kernels/cpu_parallel.h 2 * kMinItemsPerThread | n") == "65,536"
    assert renderer["render"]("const kernels/cpu_parallel.h kMinItemsPerThread * 4 | bytes") == "128 KiB"
    assert "code" in renderer["stale"]("`>= <!-- render: python -->3.11<!-- /render -->`")[0][3]
    assert "raw HTML" in renderer["stale"]("a\n  <!-- render: python -->3.11<!-- /render --> b")[0][3]
    assert renderer["stale"]("a <!-- render: python -->2.7<!-- /render -->")[0][1:] == (
        "python",
        "2.7",
        renderer["render"]("python"),
    )
