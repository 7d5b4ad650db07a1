"""Kernels compiled at run time (python/scale_lib/_nvrtc.py): the cache (keys, files checked
before use, atomic writes under several processes, corruption, unusable directories), the
library without NVRTC and compile errors, on the CPU (NVRTC needs no GPU); then the softmax
example on a GPU: both kernels against a float64 reference, the capture rule, errors through the
op."""

# op-file: softmax (the cache is tested with its kernel)

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

import numpy as np
import pytest
from backends import Backend

import scale_lib
from scale_lib import _nvrtc

SOURCE = (_nvrtc.SOURCES / "softmax.cu").read_text()
DEFINES = {
    "SCALE_LIB_COLS": "1000",
    "SCALE_LIB_DTYPE": "2",
    "SCALE_LIB_THREADS_PER_ROW": "32",
    "SCALE_LIB_ROWS_PER_BLOCK": "4",
    "SCALE_LIB_VEC": "1",
}
ARCH = 80


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh cache directory (not created yet) and an empty in-memory cache."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("SCALE_LIB_CACHE_DIR", str(directory))
    _nvrtc.reset()
    yield directory
    _nvrtc.reset()


@pytest.fixture
def compiler(cache) -> _nvrtc.Nvrtc:
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
        _nvrtc.cache_key(SOURCE, {**DEFINES, "SCALE_LIB_COLS": "1001"}, ARCH, (13, 0)),
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
def test_without_nvrtc_nothing_compiles(cache, monkeypatch, setting: str) -> None:
    monkeypatch.setenv("SCALE_LIB_NVRTC", setting)
    _nvrtc.reset()
    assert _nvrtc.nvrtc() is None
    assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH) is None
    assert _nvrtc.cubin("softmax", [f"{k}={v}" for k, v in DEFINES.items()], ARCH) is None
    assert not cache.exists()


def test_library_works_without_nvrtc(tmp_path) -> None:
    """A process with no NVRTC imports the library, and softmax (and another op) work."""
    code = textwrap.dedent("""
        import numpy as np, scale_lib
        from scale_lib import _nvrtc
        assert _nvrtc.nvrtc() is None
        x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
        y = scale_lib.softmax(x)
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-6)
        np.testing.assert_allclose(scale_lib.scale(x, 2.0), 2 * x)
        print("ok")
    """)
    env = {**os.environ, "SCALE_LIB_NVRTC": "0", "SCALE_LIB_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


# -- compiling and the cache ------------------------------------------------------------------
def test_compiles_a_cubin_and_caches_it_in_memory_and_on_disk(compiler, cache, monkeypatch) -> None:
    cubin = _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)
    assert cubin[:4] == b"\x7fELF"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    (path,) = cache.glob("*.cubin")
    assert _nvrtc.read_cached(path) == cubin
    assert not [p for p in cache.iterdir() if p.suffix == ".tmp"]

    def no_compile(*args):
        raise AssertionError("compiled again")

    monkeypatch.setattr(_nvrtc.Nvrtc, "compile", no_compile)
    assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH) == cubin  # memory
    _nvrtc._memory.clear()
    assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH) == cubin  # disk


def test_specialisations_are_different_cubins(compiler, cache) -> None:
    a = _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)
    b = _nvrtc.compile_cached("softmax", SOURCE, {**DEFINES, "SCALE_LIB_COLS": "1024"}, ARCH)
    c = _nvrtc.compile_cached("softmax", SOURCE, DEFINES, 90)
    assert len({a, b, c}) == 3 and len(list(cache.glob("*.cubin"))) == 3


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
def test_a_damaged_file_is_rebuilt(compiler, cache, damage) -> None:
    cubin = _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)
    (path,) = cache.glob("*.cubin")
    path.write_bytes(damage(path.read_bytes()))
    assert _nvrtc.read_cached(path) is None
    _nvrtc._memory.clear()
    assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH) == cubin
    assert _nvrtc.read_cached(path) == cubin


def test_clear_cache(compiler, cache) -> None:
    _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)
    assert list(cache.glob("*.cubin"))
    scale_lib.clear_kernel_cache()
    assert not list(cache.glob("*.cubin")) and not _nvrtc._memory


def test_an_uncreatable_cache_directory_compiles_in_memory(compiler, tmp_path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SCALE_LIB_CACHE_DIR", str(blocker / "cache"))
    _nvrtc.reset()
    with pytest.warns(RuntimeWarning, match="cannot be used"):
        cubin = _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)
    assert cubin[:4] == b"\x7fELF"
    _nvrtc.compile_cached("softmax", SOURCE, {**DEFINES, "SCALE_LIB_COLS": "999"}, ARCH)  # warned once


def test_a_cache_directory_others_can_write_is_not_used(compiler, cache) -> None:
    cache.mkdir(mode=0o700)
    cache.chmod(0o777)
    with pytest.warns(RuntimeWarning, match="writable by others"):
        assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)[:4] == b"\x7fELF"
    assert not list(cache.iterdir())


def test_a_read_only_cache_directory_compiles_in_memory(compiler, cache, monkeypatch) -> None:
    cache.mkdir(mode=0o700)
    if os.geteuid() == 0:  # root writes anyway: make the writes fail as they would

        def read_only(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(_nvrtc.tempfile, "mkstemp", read_only)
    else:
        cache.chmod(0o500)
    try:
        with pytest.warns(RuntimeWarning, match="cannot write"):
            assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)[:4] == b"\x7fELF"
        assert not list(cache.iterdir())
        assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)[:4] == b"\x7fELF"  # memory
    finally:
        cache.chmod(0o700)


# -- several processes at once ----------------------------------------------------------------
def _compile_in_child(directory: str, cols: str) -> str:
    os.environ["SCALE_LIB_CACHE_DIR"] = directory
    _nvrtc.reset()
    cubin = _nvrtc.compile_cached("softmax", SOURCE, {**DEFINES, "SCALE_LIB_COLS": cols}, ARCH)
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


def test_processes_compiling_the_same_key(compiler, cache) -> None:
    context = multiprocessing.get_context("spawn")  # fork is unsafe with JAX threads
    with context.Pool(4) as pool:
        digests = pool.starmap(_compile_in_child, [(str(cache), "777")] * 4)
    assert len(set(digests)) == 1, digests
    (path,) = cache.glob("*.cubin")
    assert hashlib.sha256(_nvrtc.read_cached(path)).hexdigest() == digests[0]
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temporary file left


def test_readers_never_see_a_torn_file(compiler, cache) -> None:
    cubin = _nvrtc.compile_cached("softmax", SOURCE, DEFINES, ARCH)
    (path,) = cache.glob("*.cubin")
    done = cache / "done"
    context = multiprocessing.get_context("spawn")  # fork is unsafe with JAX threads
    with context.Pool(4) as pool:
        started = [str(cache / f"reader{i}") for i in range(2)]
        readers = [pool.apply_async(_read_while_written, (str(path), str(done), s)) for s in started]
        writers = [pool.apply_async(_write_repeatedly, (str(path), cubin, 300, started)) for _ in range(2)]
        for w in writers:
            w.get(timeout=300)
        done.touch()
        reads = [r.get(timeout=300) for r in readers]
    assert all(n > 0 for n in reads)
    assert _nvrtc.read_cached(path) == cubin


# -- compile errors ---------------------------------------------------------------------------
def test_a_compile_error_carries_nvrtc_log(compiler, cache) -> None:
    broken = SOURCE.replace("constexpr int kCols = SCALE_LIB_COLS;", "constexpr int kCols = undeclared_name;")
    with pytest.raises(scale_lib.NvrtcError, match=r"(?s)could not compile softmax\.cu.*undeclared_name"):
        _nvrtc.compile_cached("softmax", broken, DEFINES, ARCH)
    assert issubclass(scale_lib.NvrtcError, RuntimeError)
    assert not list(cache.glob("*.cubin"))


def test_an_unknown_architecture_is_not_compiled(compiler, cache) -> None:
    assert _nvrtc.compile_cached("softmax", SOURCE, DEFINES, 11) is None


# -- the op on a GPU --------------------------------------------------------------------------
def _reference(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


TOLERANCES = {
    "float16": (2e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (3e-5, 1e-6),
    "float64": (1e-12, 1e-14),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("cols", [1, 31, 32, 100, 1000, 1024, 1025, 4096, 8191, 16384, 32768, 32769])
def test_softmax_kernels_on_gpu(cache, dtype: str, cols: int) -> None:
    """Every specialisation family (a warp or a block per row, 16-byte loads or not, a partial
    last chunk) and the ahead-of-time kernel past 32768, with a sentinel-filled output; the
    row count is odd so a block's last rows are idle."""
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    rows = 7
    data = np.random.default_rng(cols).standard_normal((rows, cols)) * 4
    x = torch.tensor(data, device="cuda").to(getattr(torch, dtype))
    expected = _reference(x.double().cpu().numpy())
    rtol, atol = TOLERANCES[dtype]
    # The op (runtime-compiled where NVRTC is present), then the ahead-of-time kernel alone.
    for run in (lambda o: scale_lib.softmax(x, out=o), lambda o: scale_lib.lib.softmax_ahead_of_time(o, x)):
        out = torch.full((rows + 1, cols), float("nan"), device="cuda", dtype=x.dtype)
        run(out[:rows])
        result = out.double().cpu().numpy()
        np.testing.assert_allclose(result[:rows], expected, rtol=rtol, atol=atol)
        assert np.isnan(result[rows]).all(), "stray write"


@pytest.mark.gpu
def test_softmax_first_call_during_capture_asks_for_a_warm_up(cache) -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    if _nvrtc.nvrtc() is None:
        pytest.skip("no NVRTC: softmax runs its ahead-of-time kernel")
    import torch

    x = torch.randn(5, 777, device="cuda")  # a row length no other test uses
    side = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()

    def capture() -> None:
        with torch.cuda.graph(graph, stream=side):
            x.mul_(1.0)  # the graph is not empty
            scale_lib.softmax(x)

    with pytest.raises(RuntimeError, match=r"during CUDA graph capture.*warm-up"):
        capture()
    # After a warm-up call the same call captures and replays.
    torch.cuda.synchronize()
    scale_lib.softmax(x)
    static_out = torch.empty_like(x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        scale_lib.softmax(x, out=static_out)
    x.copy_(torch.randn(5, 777, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    np.testing.assert_allclose(
        static_out.cpu().numpy(), _reference(x.double().cpu().numpy()), rtol=3e-5, atol=1e-6
    )


@pytest.mark.gpu
def test_softmax_compile_error_through_the_op(tmp_path) -> None:
    """A kernel source NVRTC rejects: the op raises NvrtcError with NVRTC's log. In a fresh
    process, whose kernel table holds nothing yet (another test may have loaded this key)."""
    Backend("torch", "cuda").skip_if_unavailable()
    if _nvrtc.nvrtc() is None:
        pytest.skip("no NVRTC")
    broken = tmp_path / "kernels"
    broken.mkdir()
    (broken / "softmax.cu").write_text(SOURCE.replace("typedef float Compute;", "typedef flaot Compute;"))
    code = textwrap.dedent(f"""
        import pathlib, re, torch, scale_lib
        from scale_lib import _nvrtc
        _nvrtc.SOURCES = pathlib.Path({str(broken)!r})
        x = torch.randn(3, 779, device="cuda", dtype=torch.float16)
        try:
            scale_lib.softmax(x)
        except scale_lib.NvrtcError as err:
            print("ok" if re.search(r"(?s)could not compile.*flaot", str(err)) else str(err))
        else:
            print("no error")
    """)
    env = {**os.environ, "SCALE_LIB_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().splitlines()[-1:] == ["ok"], run.stdout + run.stderr


@pytest.mark.gpu
def test_softmax_on_gpu_without_nvrtc(tmp_path) -> None:
    """Without NVRTC the ahead-of-time kernel gives the same results, and a first call can be
    captured into a CUDA graph."""
    Backend("torch", "cuda").skip_if_unavailable()
    code = textwrap.dedent("""
        import numpy as np, torch, scale_lib
        for cols in (7, 1000, 4096):
            x = torch.randn(9, cols, device="cuda", dtype=torch.float64)
            y = scale_lib.softmax(x).cpu().numpy()
            e = np.exp(x.cpu().numpy() - x.cpu().numpy().max(-1, keepdims=True))
            np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-12, atol=1e-14)
        # Nothing to load: a first call may be captured.
        x = torch.randn(3, 785, device="cuda")
        out = torch.empty_like(x)
        graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.graph(graph, stream=side):
            scale_lib.softmax(x, out=out)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, torch.softmax(x, dim=-1))
        print("ok")
    """)
    env = {**os.environ, "SCALE_LIB_NVRTC": "0", "SCALE_LIB_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


@pytest.mark.gpu
def test_softmax_compiles_under_torch_compile(cache) -> None:
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    torch._dynamo.reset()
    f = torch.compile(lambda v: scale_lib.softmax(v) * 2, fullgraph=True)
    x = torch.randn(6, 781, device="cuda")  # a new key: compiled at the first run
    np.testing.assert_allclose(
        f(x).cpu().numpy(), 2 * _reference(x.double().cpu().numpy()), rtol=3e-5, atol=1e-6
    )


@pytest.mark.gpu
def test_softmax_compiles_under_jax_jit(cache) -> None:
    Backend("jax", "cuda").skip_if_unavailable()
    import jax

    x = jax.device_put(
        np.random.default_rng(0).standard_normal((6, 783)).astype(np.float32), jax.devices("gpu")[0]
    )
    y = jax.jit(lambda v: scale_lib.softmax(v) * 2)(x)
    np.testing.assert_allclose(
        np.asarray(y), 2 * _reference(np.asarray(x, dtype=np.float64)), rtol=3e-5, atol=1e-6
    )


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [100, 4096, 40000])
def test_softmax_special_values_on_gpu(cache, cols: int) -> None:
    """NaN and +inf make their row NaN, -inf elements get 0, in both kernels, like NumPy."""
    Backend("torch", "cuda").skip_if_unavailable()
    import torch

    data = np.random.default_rng(cols).standard_normal((4, cols))
    data[0, 3] = np.nan
    data[1, 5] = np.inf
    data[2, ::3] = -np.inf
    with np.errstate(invalid="ignore"):
        expected = _reference(data)
    x = torch.tensor(data, device="cuda", dtype=torch.float32)
    for run in (lambda o: scale_lib.softmax(x, out=o), lambda o: scale_lib.lib.softmax_ahead_of_time(o, x)):
        out = torch.empty_like(x)
        run(out)
        np.testing.assert_allclose(out.double().cpu().numpy(), expected, rtol=3e-5, atol=1e-6, equal_nan=True)


def test_softmax_special_values_on_cpu() -> None:
    """The CPU twin treats NaN, +inf and -inf as the CUDA kernels do."""
    data = np.random.default_rng(1).standard_normal((4, 100))
    data[0, 3] = np.nan
    data[1, 5] = np.inf
    data[2, ::3] = -np.inf
    with np.errstate(invalid="ignore"):
        expected = _reference(data)
    np.testing.assert_allclose(scale_lib.softmax(data), expected, rtol=1e-12, atol=1e-14, equal_nan=True)
