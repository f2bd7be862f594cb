import os
import shutil
import subprocess

import pytest


@pytest.fixture(scope="session")
def sluice_bin():
    path = os.environ.get("SLUICE_BIN") or shutil.which("sluice")
    if not path or not os.path.exists(path):
        pytest.fail("SLUICE_BIN must point at the built sluice binary")
    return path


@pytest.fixture
def run_sluice(sluice_bin):
    def run(*args, check=True):
        proc = subprocess.run([sluice_bin, *map(str, args)], capture_output=True, text=True,
                              timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"sluice {' '.join(map(str, args))} exited {proc.returncode}:\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        return proc
    return run


# The Python client tests' served data set (client_support.py), here so that one server serves
# every module of a session.
from client_support import client, data_dir, fleet, server  # noqa: E402,F401
