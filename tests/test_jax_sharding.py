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


# --- the Shardy rule, without devices -------------------------------------------------------------
def _rule(op, arrays, attrs=None):
    import fusegen as fg
    from fusegen import jax_sharding
    from fusegen.plan import dimflow
    spec = fg.infer(op, [a.dtype.name for a in arrays], [a.shape for a in arrays], op.bind_attrs(attrs or {}))
    return jax_sharding.sharding_rule(dimflow.analyze(spec))


def test_shardy_rules_name_special_factors_in_order_and_major_links_as_compound_factors():
    """Shardy rejects special factors out of the order the rule first names them (a gather's
    replicated dims did that: 'indices of special factors must be sorted'); a reshape's -1 dim
    and x's rows are one factor, the larger dim the compound of it and a minor factor."""
    import numpy as np
    from fusegen.bench.cases import OPS
    import fusegen as fg

    @fg.op
    def major_split(x):
        return fg.reshape(x, (-1, 2, 3)) * 2.0
    emb = OPS["embedding_layer_norm"]
    rule = _rule(emb.op, emb.make_inputs((8, 16), "float32"), emb.variants[-1])
    names = [n for m in (*rule.operand_mappings, *rule.result_mappings) for d in m
             for n in (d if isinstance(d, tuple) else (d,))]
    first = list(dict.fromkeys(names))
    assert len(rule.need_replication_factors) > 1
    assert list(rule.need_replication_factors) == sorted(rule.need_replication_factors, key=first.index)
    rule = _rule(major_split, [np.zeros((16, 3), np.float32)])
    assert [tuple(m) for m in rule.operand_mappings] == [(("f0", "m0"), "f1")]
    assert tuple(rule.result_mappings[0])[0] == "f0" and rule.factor_sizes == {"m0": 2}
