"""Kernels compiled at run time (python/scale_lib/_nvrtc.py), on the CPU (NVRTC needs no GPU):
the cache (keys, files checked before use, atomic writes under several processes, corruption,
unusable directories), the library without NVRTC, and compile errors. They compile a small
kernel of their own; each op compiled at run time tests its kernels in its own test file."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import scale_lib
from scale_lib import _nvrtc

SOURCE = """\
// The cache's test kernel: out[i] = SCALE_LIB_VALUE.
extern "C" __global__ void fill(float* __restrict__ out, long long n) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = SCALE_LIB_VALUE;
}
"""
DEFINES = {"SCALE_LIB_VALUE": "1.5f", "SCALE_LIB_UNUSED": "4"}
ARCH = 80


@pytest.fixture
def compiler(kernel_cache) -> _nvrtc.Nvrtc:
    found = _nvrtc.nvrtc()
    if found is None:
        pytest.skip("no NVRTC (pip install 'scale-lib[nvrtc]')")
    return found


# -- keys -------------------------------------------------------------------------------------
def test_cache_key_covers_everything_the_cubin_depends_on(monkeypatch) -> None:
    base = _nvrtc.cache_key(SOURCE, DEFINES, ARCH, (13, 0))
    assert base == _nvrtc.cache_key(SOURCE, dict(reversed(list(DEFINES.items()))), ARCH, (13, 0))
    changed = {
        _nvrtc.cache_key(SOURCE + "\n", DEFINES, ARCH, (13, 0)),
        _nvrtc.cache_key(SOURCE, {**DEFINES, "SCALE_LIB_VALUE": "2.5f"}, ARCH, (13, 0)),
        _nvrtc.cache_key(SOURCE, {**DEFINES, "EXTRA": "1"}, ARCH, (13, 0)),
        _nvrtc.cache_key(SOURCE, DEFINES, 90, (13, 0)),
        _nvrtc.cache_key(SOURCE, DEFINES, ARCH, (12, 9)),
    }
    monkeypatch.setitem(_nvrtc.BUILD_INFO, "version", "999.0")
    changed.add(_nvrtc.cache_key(SOURCE, DEFINES, ARCH, (13, 0)))
    assert base not in changed and len(changed) == 6


def test_nvrtc_is_chosen_by_the_cuda_major_of_the_build() -> None:
    assert all(p.endswith("libnvrtc.so.12") for p in _nvrtc._candidates(12))
    assert any(
        p.endswith(os.path.join("nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12")) or p == "libnvrtc.so.12"
        for p in _nvrtc._candidates(12)
    )
    assert all(p.endswith("libnvrtc.so.13") for p in _nvrtc._candidates(13))
    assert _nvrtc._candidates(13)[-1] == "libnvrtc.so.13"  # the system's last
    assert [p for p in _nvrtc._candidates(None) if "/" not in p] == ["libnvrtc.so.13", "libnvrtc.so.12"]


# -- without NVRTC ----------------------------------------------------------------------------
@pytest.mark.parametrize("setting", ["0", "/nonexistent/libnvrtc.so.13"])
def test_without_nvrtc_nothing_compiles(kernel_cache, monkeypatch, setting: str) -> None:
    monkeypatch.setenv("SCALE_LIB_NVRTC", setting)
    _nvrtc.reset()
    assert _nvrtc.nvrtc() is None
    assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH) is None
    monkeypatch.setattr(_nvrtc, "SOURCES", kernel_cache.parent)
    (kernel_cache.parent / "fill.cu").write_text(SOURCE)
    assert _nvrtc.cubin("fill", [f"{k}={v}" for k, v in DEFINES.items()], ARCH) is None
    assert not kernel_cache.exists()


def test_library_works_without_nvrtc(tmp_path) -> None:
    """A process with no NVRTC imports the library, and its ops work (each op compiled at run
    time falls back to its ahead-of-time or CPU kernel: its own tests check that)."""
    code = textwrap.dedent("""
        import numpy as np, scale_lib
        from scale_lib import _nvrtc
        assert _nvrtc.nvrtc() is None
        x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
        np.testing.assert_allclose(scale_lib.scale(x, 2.0), 2 * x)
        print("ok")
    """)
    env = {**os.environ, "SCALE_LIB_NVRTC": "0", "SCALE_LIB_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


# -- compiling and the cache ------------------------------------------------------------------
def test_compiles_a_cubin_and_caches_it_in_memory_and_on_disk(compiler, kernel_cache, monkeypatch) -> None:
    cubin = _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)
    assert cubin[:4] == b"\x7fELF"
    assert stat.S_IMODE(kernel_cache.stat().st_mode) == 0o700
    (path,) = kernel_cache.glob("*.cubin")
    assert _nvrtc.read_cached(path) == cubin
    assert not [p for p in kernel_cache.iterdir() if p.suffix == ".tmp"]

    def no_compile(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(_nvrtc.Nvrtc, "compile", no_compile)
    assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH) == cubin  # memory
    _nvrtc._memory.clear()
    assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH) == cubin  # disk


def test_specialisations_are_different_cubins(compiler, kernel_cache) -> None:
    a = _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)
    b = _nvrtc.compile_cached("fill", SOURCE, {**DEFINES, "SCALE_LIB_VALUE": "2.5f"}, ARCH)
    c = _nvrtc.compile_cached("fill", SOURCE, DEFINES, 90)
    assert len({a, b, c}) == 3 and len(list(kernel_cache.glob("*.cubin"))) == 3


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # torn
        lambda data: data[:-1] + bytes([data[-1] ^ 1]),  # one bit of the code
        lambda data: b"X" + data[1:],  # the magic
        lambda data: b"",
    ],
    ids=["truncated", "bit-flip", "magic", "empty"],
)
def test_a_damaged_file_is_rebuilt(compiler, kernel_cache, damage) -> None:
    cubin = _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)
    (path,) = kernel_cache.glob("*.cubin")
    path.write_bytes(damage(path.read_bytes()))
    assert _nvrtc.read_cached(path) is None
    _nvrtc._memory.clear()
    assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH) == cubin
    assert _nvrtc.read_cached(path) == cubin


def test_clear_cache(compiler, kernel_cache) -> None:
    _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)
    assert list(kernel_cache.glob("*.cubin"))
    scale_lib.clear_kernel_cache()
    assert not list(kernel_cache.glob("*.cubin")) and not _nvrtc._memory


def test_an_uncreatable_cache_directory_compiles_in_memory(compiler, tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SCALE_LIB_CACHE_DIR", str(blocker / "cache"))
    _nvrtc.reset()
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        cubin = _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)
    assert cubin[:4] == b"\x7fELF"
    _nvrtc.compile_cached("fill", SOURCE, {**DEFINES, "SCALE_LIB_VALUE": "3.5f"}, ARCH)  # warned once


def test_a_cache_directory_others_can_write_is_not_used(compiler, kernel_cache) -> None:
    kernel_cache.mkdir(mode=0o700)
    kernel_cache.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)[:4] == b"\x7fELF"
    assert not list(kernel_cache.iterdir())


def test_a_read_only_cache_directory_compiles_in_memory(compiler, kernel_cache, monkeypatch) -> None:
    kernel_cache.mkdir(mode=0o700)
    if os.geteuid() == 0:  # root writes anyway: make the writes fail as they would

        def read_only(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(_nvrtc.tempfile, "mkstemp", read_only)
    else:
        kernel_cache.chmod(0o500)
    try:
        with pytest.warns(RuntimeWarning, match="cannot write"):
            assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)[:4] == b"\x7fELF"
        assert not list(kernel_cache.iterdir())
        assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)[:4] == b"\x7fELF"  # memory
    finally:
        kernel_cache.chmod(0o700)


# -- several processes at once ----------------------------------------------------------------
def _compile_in_child(directory: str, value: str) -> str:
    os.environ["SCALE_LIB_CACHE_DIR"] = directory
    _nvrtc.reset()
    cubin = _nvrtc.compile_cached("fill", SOURCE, {**DEFINES, "SCALE_LIB_VALUE": value}, ARCH)
    return hashlib.sha256(cubin).hexdigest()


def _read_while_written(path: str, done: str, started: str) -> int:
    """Reads the file until ``done`` exists; every read must find the whole CUBIN (os.replace
    swaps whole files). Returns how many reads it made."""
    Path(started).touch()
    reads = 0
    while not os.path.exists(done) and reads < 10**6:
        assert _nvrtc.read_cached(Path(path)) is not None, "a torn or altered file was found"
        reads += 1
    return reads


def _write_repeatedly(path: str, cubin: bytes, rounds: int, readers: list[str]) -> None:
    deadline = time.monotonic() + 120
    while not all(os.path.exists(r) for r in readers) and time.monotonic() < deadline:
        time.sleep(0.01)  # until the readers read
    for _ in range(rounds):
        assert _nvrtc.write_cached(Path(path), cubin)


def test_processes_compiling_the_same_key(compiler, kernel_cache) -> None:
    context = multiprocessing.get_context("spawn")  # fork is unsafe with JAX threads
    with context.Pool(4) as pool:
        digests = pool.starmap(_compile_in_child, [(str(kernel_cache), "7.0f")] * 4)
    assert len(set(digests)) == 1, digests
    (path,) = kernel_cache.glob("*.cubin")
    assert hashlib.sha256(_nvrtc.read_cached(path)).hexdigest() == digests[0]
    assert [p.name for p in kernel_cache.iterdir()] == [path.name]  # no temporary file left


def test_readers_never_see_a_torn_file(compiler, kernel_cache) -> None:
    cubin = _nvrtc.compile_cached("fill", SOURCE, DEFINES, ARCH)
    (path,) = kernel_cache.glob("*.cubin")
    done = kernel_cache / "done"
    context = multiprocessing.get_context("spawn")  # fork is unsafe with JAX threads
    with context.Pool(4) as pool:
        started = [str(kernel_cache / f"reader{i}") for i in range(2)]
        readers = [pool.apply_async(_read_while_written, (str(path), str(done), s)) for s in started]
        writers = [pool.apply_async(_write_repeatedly, (str(path), cubin, 300, started)) for _ in range(2)]
        for w in writers:
            w.get(timeout=300)
        done.touch()
        reads = [r.get(timeout=300) for r in readers]
    assert all(n > 0 for n in reads)
    assert _nvrtc.read_cached(path) == cubin


# -- compile errors ---------------------------------------------------------------------------
def test_a_compile_error_carries_nvrtc_log(compiler, kernel_cache) -> None:
    broken = SOURCE.replace("out[i] = SCALE_LIB_VALUE;", "out[i] = undeclared_name;")
    with pytest.raises(scale_lib.NvrtcError, match=r"(?s)could not compile fill\.cu.*undeclared_name"):
        _nvrtc.compile_cached("fill", broken, DEFINES, ARCH)
    assert issubclass(scale_lib.NvrtcError, RuntimeError)
    assert not list(kernel_cache.glob("*.cubin"))


def test_an_unknown_architecture_is_not_compiled(compiler, kernel_cache) -> None:
    assert _nvrtc.compile_cached("fill", SOURCE, DEFINES, 11) is None
