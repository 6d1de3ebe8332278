"""``fusegen bench --bridges`` (fusegen.bench_bridges): fused ops inside jax.jit and torch.compile
against jnp/torch code, and the sharded row. No timing assertions (shared, noisy machines): every
method must be checked against NumPy, the timings positive, the report complete. The default run
takes the JAX methods and the sharded child on one op; torch.compile is in the slow run."""
from __future__ import annotations

import json

import pytest

from fusegen import cli
from fusegen.bench import bridges as bench_bridges

from _optional import needs


def test_bench_bridges_is_a_bench_option(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_run(cfg, say):
        seen["cfg"] = cfg
        return {"bandwidth_gbps": 1.0, "config": {}, "cases": [], "sharded": None, "skipped": {"torch": "why"},
                "ok": True}

    monkeypatch.setattr(bench_bridges, "run", fake_run)
    path = tmp_path / "b.json"
    assert cli.main(["bench", "--bridges", "--quick", "--ops", "softmax", "--no-torch", "--json", str(path),
                     "--progress", "off"]) == 0
    cfg = seen["cfg"]
    assert cfg.ops == ("softmax",) and cfg.large == (256, 256) and not cfg.torch and cfg.jax
    assert json.loads(path.read_text())["ok"] is True
    assert "skipped torch: why" in capsys.readouterr().out


def _check(doc, methods):
    assert doc["ok"], json.dumps(doc, indent=1)[-3000:]
    for case in doc["cases"]:
        assert set(case["results"]) == set(methods)
        for r in case["results"].values():
            assert r["ok"] and r["median_s"] > 0 and r["max_rel_err"] < 1e-3
            assert case["size"] == "small" or r["x_bound"] > 0
    text = bench_bridges.report(doc)
    assert all(m in text for m in methods)


@needs("jax", "g++")
def test_jax_methods_and_the_sharded_row():
    doc = bench_bridges.run(bench_bridges.BridgeConfig.quick(ops=("layer_norm",), torch=False, rounds=2,
                                                            per_call_rounds=2, per_call_calls=10))
    _check(doc, ["jax.jit(fg)", "jax.jit(jnp)"])
    (row,) = doc["sharded"]["cases"]
    assert doc["sharded"]["devices"] == 4 and row["ok"]
    assert set(row["results"]) == {"jax.jit(fg) 1 device", "jax.jit(fg) 4 devices", "jax.jit(jnp) 1 device",
                                   "jax.jit(jnp) 4 devices"}
    assert "sharded over 4 host devices" in bench_bridges.report(doc)


@pytest.mark.slow
@needs("jax", "torch", "g++")
def test_every_op_through_both_bridges():
    doc = bench_bridges.run(bench_bridges.BridgeConfig.quick(sharded=False))
    _check(doc, ["jax.jit(fg)", "jax.jit(jnp)", "torch.compile(fg)", "torch.compile(torch)"])
