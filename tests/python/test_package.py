"""The Python client as a package, away from the checkout: a plain copy of client/python builds a
wheel and an sdist, the sdist builds a wheel of its own, and the wheel installs into a fresh venv
(no network: its dependencies come from the wheels deploy/install-deps.sh saved in
$SLUICE_WHEELHOUSE) and streams from a real `sluice serve`.

Run with build/venv's Python, which has the build requirements (setuptools, wheel, grpcio-tools):
the builds use it with --no-build-isolation, so nothing is downloaded.
"""
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ["proto/sluice/v1/config.proto", "proto/sluice/v1/service.proto"]
GENERATED = ["sluice/v1/__init__.py", "sluice/v1/config_pb2.py", "sluice/v1/service_pb2.py",
             "sluice/v1/service_pb2_grpc.py"]


def _run(args, cwd=None, timeout=300):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)  # the copy and the venv, never the checkout's modules
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, "%s exited %d:\n%s\n%s" % (
        " ".join(map(str, args)), proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def _wheel(source, out):
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
          "--no-index", "-w", out, source])
    (wheel,) = Path(out).glob("sluice-*.whl")
    return wheel


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    """client/python as `cp -r` would copy it, less what a build in the checkout left there."""
    out = tmp_path_factory.mktemp("copy") / "python"
    shutil.copytree(ROOT / "client" / "python", out, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", "*_pb2*.py*"))
    assert not (out / "sluice" / "v1" / "service_pb2.py").exists()
    return out


@pytest.fixture(scope="module")
def wheelhouse():
    path = os.environ.get("SLUICE_WHEELHOUSE") or str(ROOT / "build" / "wheels")
    if not list(Path(path).glob("grpcio-*.whl")):
        pytest.fail("no dependency wheels in %s: run deploy/install-deps.sh" % path)
    return path


def test_the_package_carries_its_protos_and_the_cpp_build_reads_the_same_files():
    for proto in PROTOS:
        carried = ROOT / "client" / "python" / proto
        assert carried.is_file() and not carried.is_symlink()
        assert (ROOT / proto).resolve() == carried.resolve()


def test_an_sdist_of_a_copy_carries_the_protos_and_builds_a_wheel(copy, tmp_path):
    _run([sys.executable, "-c",
          "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
          tmp_path / "sdist"], cwd=copy)
    (sdist,) = (tmp_path / "sdist").glob("sluice-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        for proto in PROTOS:
            assert "%s/%s" % (top, proto) in names
        tar.extractall(tmp_path / "unpacked")
    wheel = _wheel(tmp_path / "unpacked" / top, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as z:
        assert set(GENERATED) <= set(z.namelist())


def test_a_wheel_of_a_copy_installs_into_a_fresh_venv_offline_and_streams(copy, wheelhouse,
                                                                          server, tmp_path):
    wheel = _wheel(copy, tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as z:
        assert set(GENERATED) <= set(z.namelist())
    venv = tmp_path / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", venv])
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheelhouse, wheel])
    code = """
import sys
import sluice
assert sluice.__file__.startswith(sys.prefix), sluice.__file__
with sluice.Client(sys.argv[1]) as client:
    names = [d.name for d in client.datasets()]
    batches = 0
    for images, labels, position in client.stream("ordered", batch_size=8):
        assert images.shape[0] == len(labels) == 8
        batches += 1
        if batches == 3:
            break
print(",".join(names), batches)
"""
    out = _run([python, "-c", code, server.target], cwd=tmp_path).split()
    assert "ordered" in out[0].split(",")
    assert out[1] == "3"
