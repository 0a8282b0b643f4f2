"""e2e/kube/build.py's third-party controllers: their own cache key, and how a test waits for the background build
(``controllers``): binaries present -> at once; a build holding the lock -> wait, with a deadline; a build that
failed -> its error, not a timeout. Go is never run here (the build itself is monkeypatched)."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from e2e.kube import build


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VPO_CACHE_DIR", str(tmp_path))
    return tmp_path


def _fill(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name in build.CONTROLLERS.binaries:
        (d / name).write_text("#!/bin/sh\n")
        (d / name).chmod(0o755)


def test_the_key_names_both_versions_and_is_not_the_control_planes(cache: Path) -> None:
    d = build.controllers_dir()
    versions = build.controller_versions()
    assert versions["keda"] == "v2.20.2" and versions["kueue"] == "v0.17.0"
    assert d.name.startswith("controllers-keda-v2.20.2_kueue-v0.17.0_") and d.parent == cache / "bin"
    assert d != build.bin_dir()


def test_the_pins_are_kedas_own(cache: Path) -> None:
    """KEDA's replace block must be in the wrapper's go.mod: a dependency's replace directives do not apply."""
    text = (build.CONTROLLERS.dir / "go.mod").read_text()
    for pin in ("k8s.io/client-go => k8s.io/client-go v0.35.5", "sigs.k8s.io/controller-runtime => sigs.k8s.io/controller-runtime v0.23.3"):
        assert pin in text


def test_present_binaries_are_returned_without_waiting(cache: Path) -> None:
    _fill(build.controllers_dir())
    paths = build.controllers(wait_seconds=0)
    assert set(paths) == set(build.CONTROLLERS.binaries)


def test_a_running_build_is_waited_for_until_it_finishes(cache: Path) -> None:
    d = build.controllers_dir()
    lock = d.parent / f"{d.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fh = open(lock, "w")
    fcntl.flock(fh, fcntl.LOCK_EX)
    released = threading.Event()

    def finish() -> None:
        released.wait(10)
        _fill(d)
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()

    t = threading.Thread(target=finish)
    t.start()
    said: list[str] = []

    def log(msg: str) -> None:
        said.append(msg)
        released.set()  # the waiter has seen the build running: let it finish

    paths = build.controllers(wait_seconds=30, log=log)
    t.join()
    assert all(p.is_file() for p in paths.values())
    assert any("waiting up to 30 s" in m for m in said)


def test_a_build_still_running_at_the_deadline_is_an_error(cache: Path) -> None:
    d = build.controllers_dir()
    lock = d.parent / f"{d.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with pytest.raises(build.MissingBinaries, match="still running after"):
            build.controllers(wait_seconds=0.5, log=lambda _: None)


def test_a_failed_background_build_says_why(cache: Path) -> None:
    d = build.controllers_dir()
    d.mkdir(parents=True)
    (d / build.CONTROLLERS_FAILED).write_text("RuntimeError: [controllers] go build failed (exit 1)\n")
    with pytest.raises(build.MissingBinaries, match="go build failed"):
        build.controllers(wait_seconds=5, log=lambda _: None)


def test_a_failed_build_writes_its_error_and_the_next_one_clears_it(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> float:
        raise RuntimeError("go: module lookup disabled")

    monkeypatch.setattr(build, "_build_group", broken)
    with pytest.raises(RuntimeError):
        build.build_controllers(log=lambda _: None)
    d = build.controllers_dir()
    assert "module lookup disabled" in (d / build.CONTROLLERS_FAILED).read_text()

    def works(group: build.Group, version: str, out: Path, logfile: Path, log: object) -> float:
        _fill(out)
        return 12.5

    monkeypatch.setattr(build, "_build_group", works)
    paths = build.build_controllers(log=lambda _: None)
    assert not (d / build.CONTROLLERS_FAILED).exists()
    assert all(os.access(p, os.X_OK) for p in paths.values())
    assert "built in 0m12s" in build.controllers_report()
