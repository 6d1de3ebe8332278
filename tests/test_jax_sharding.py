"""Sharded fused ops in JAX, on 8 host CPU devices: runs ``tests/multidevice/jax_mesh_cases.py``
in a pytest process of its own, because the device count is fixed when JAX is first imported
(``XLA_FLAGS=--xla_force_host_platform_device_count=8`` must be set before that).

The default run takes the representative cases (one op, a layer norm, on a 2x4 mesh with Explicit
and with Auto axes, and vmap inside shard_map: its handlers are built once); the wider ones (a
sum with Auto axes and no mesh context, a gradient, a reshape split on its major part) are
``@pytest.mark.extended``; the matrix (every reference op along each dim and two mesh axes, both
axis types, every gradient, products, resharding, vmap, the GSPMD partitioner) is
``@pytest.mark.slow``. Skips without jax (``pip install "fusegen[jax]"``).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _optional import needs

pytestmark = needs("jax", "g++")

CASES = Path(__file__).parent / "multidevice" / "jax_mesh_cases.py"


def run_cases(marker: str) -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-n0", "-p", "no:cacheprovider", "-m", marker,
                        str(CASES)], env=env, capture_output=True, text=True, timeout=1800,
                       cwd=Path(__file__).parent)
    assert r.returncode == 0, f"{CASES.name} -m {marker!r} failed:\n{r.stdout[-8000:]}\n{r.stderr[-3000:]}"
    assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-3000:]


def test_sharded_calls_on_8_host_devices():
    run_cases("not slow and not extended")


@pytest.mark.extended
def test_wider_sharded_calls_on_8_host_devices():
    run_cases("extended")


@pytest.mark.slow
def test_every_reference_op_and_gradient_sharded_on_8_host_devices():
    run_cases("slow")
