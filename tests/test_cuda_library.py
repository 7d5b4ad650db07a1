"""Which library the import loads. The release wheel holds a CUDA 12 library (drivers R525 and
newer) and a CUDA 13 one (R580 and newer); the import picks one from the driver's CUDA version,
SCALE_LIB_FAKE_CUDA_DRIVER_VERSION stands in for the driver, SCALE_LIB_CUDA_MAJOR forces either.
A build from source holds one library, which every driver gets and nothing can switch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import scale_lib
from scale_lib import _lib

CU12, CU13 = _lib.CUDA_LIBRARIES[12], _lib.CUDA_LIBRARIES[13]
BOTH = {CU12, CU13}
# Drivers by release branch: the CUDA version each supports (cuDriverGetVersion's number).
R525, R550, R580 = 12000, 12040, 13000


@pytest.mark.parametrize(
    ("driver", "expected"),
    [(R525, CU12), (R550, CU12), (12090, CU12), (R580, CU13), (13020, CU13), (11080, CU12), (0, CU12)],
)
def test_the_driver_chooses_between_the_two_libraries(driver: int, expected: str) -> None:
    name, reason = _lib.choose_library(BOTH, driver, None)
    assert name == expected
    if driver:
        assert f"supports CUDA {driver // 1000}.{driver % 1000 // 10}" in reason
    else:
        assert reason == "no NVIDIA driver found (CPU only)"
    if driver == 11080:
        assert "older than either library needs" in reason


@pytest.mark.parametrize("driver", [0, R525, R580])
@pytest.mark.parametrize(("forced", "expected"), [("12", CU12), ("13", CU13)])
def test_the_switch_overrides_the_driver(driver: int, forced: str, expected: str) -> None:
    assert _lib.choose_library(BOTH, driver, forced) == (expected, f"SCALE_LIB_CUDA_MAJOR={forced} forces it")


@pytest.mark.parametrize("forced", ["11", "14", "cu13", "13.0"])
def test_the_switch_takes_only_a_major_it_has(forced: str) -> None:
    with pytest.raises(ImportError, match=f"SCALE_LIB_CUDA_MAJOR='{forced}': expected 12 or 13"):
        _lib.choose_library(BOTH, R580, forced)


@pytest.mark.parametrize("driver", [0, R525, R580])
def test_one_library_is_loaded_whatever_the_driver(driver: int) -> None:
    assert _lib.choose_library({"scale_lib"}, driver, None) == (
        "scale_lib",
        "the only library in this install",
    )
    with pytest.raises(ImportError, match="SCALE_LIB_CUDA_MAJOR=13: this install holds one library"):
        _lib.choose_library({"scale_lib"}, driver, "13")


def test_the_fake_driver_stands_in_for_the_installed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_lib.FAKE_DRIVER_ENV, "12040")
    assert _lib.driver_version() == 12040
    monkeypatch.setenv(_lib.FAKE_DRIVER_ENV, "R550")
    with pytest.raises(ImportError, match="SCALE_LIB_FAKE_CUDA_DRIVER_VERSION='R550': expected a number"):
        _lib.driver_version()


def _installed() -> set[str]:
    return _lib._available([Path(p) for p in scale_lib.__path__])


_REPORT = (
    "import json, scale_lib; i = scale_lib.build_info(); "
    "print(json.dumps([i['library'], i['library_reason'], i.get('cuda_version', '')]))"
)


def _import(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (_lib.FORCE_ENV, _lib.FAKE_DRIVER_ENV)}
    return subprocess.run(
        [sys.executable, "-c", _REPORT], capture_output=True, text=True, env={**clean, **env}
    )


@pytest.mark.parametrize(("driver", "major"), [(R525, 12), (R550, 12), (R580, 13)])
def test_the_import_loads_what_the_driver_runs(driver: int, major: int) -> None:
    """With a fake driver of each branch: the release wheel's library for it, whose build_info
    says its CUDA major; a build from source its one library."""
    child = _import(**{_lib.FAKE_DRIVER_ENV: str(driver)})
    assert child.returncode == 0, child.stderr
    library, reason, cuda = json.loads(child.stdout)
    if _installed() >= BOTH:
        assert library == f"lib{_lib.CUDA_LIBRARIES[major]}.so"
        assert reason.startswith(f"the driver supports CUDA {driver // 1000}.{driver % 1000 // 10} ")
        assert cuda.split(".")[0] == str(major)
    else:
        assert (library, reason) == ("libscale_lib.so", "the only library in this install")


@pytest.mark.parametrize("major", [12, 13])
def test_the_switch_forces_either_library(major: int) -> None:
    child = _import(**{_lib.FORCE_ENV: str(major), _lib.FAKE_DRIVER_ENV: str(R550 if major == 13 else R580)})
    if _installed() >= BOTH:
        assert child.returncode == 0, child.stderr
        library, reason, cuda = json.loads(child.stdout)
        assert (library, reason) == (
            f"lib{_lib.CUDA_LIBRARIES[major]}.so",
            f"SCALE_LIB_CUDA_MAJOR={major} forces it",
        )
        assert cuda.split(".")[0] == str(major)
    else:
        assert child.returncode != 0
        assert f"SCALE_LIB_CUDA_MAJOR={major}: this install holds one library" in child.stderr


def test_python_m_scale_lib_names_the_library_and_why() -> None:
    info = scale_lib.build_info()
    child = subprocess.run([sys.executable, "-m", "scale_lib"], capture_output=True, text=True)
    assert f"  library: {info['library']}: {info['library_reason']}" in child.stdout.splitlines()
