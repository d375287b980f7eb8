"""`gpuprov advise --check INVENTORY USAGE`: the usage replayed on an existing inventory's real
plan; and the pieces the numbers rest on (the sketch's percentile, the bounds)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

from advise_week import article_cluster, write_prometheus
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprov.cli import main
from gpuprov.core import catalog
from gpuprov.core.advise.bounds import lp_bound, simple_bound
from gpuprov.core.advise.demand import Demand
from gpuprov.core.advise.sketch import Sketch
from inventories import write_inventory

A100 = '"gpu_model": "A100-80GB", "gpu_count": 8'


def check(inventory, usage, *args):
    result = CliRunner().invoke(main, ["advise", "--check", str(inventory), str(usage), *args])
    assert "Traceback" not in result.output, result.output
    return result


def small_week(tmp_path, **shape):
    path = tmp_path / "week.prom"
    write_prometheus(path, article_cluster(**shape), 25, 3600)
    return path


def test_a_plan_too_small_names_the_workloads_that_do_not_fit_and_exits_1(tmp_path):
    usage = small_week(tmp_path, jobs=1, mid=30, churned=0, services=10)
    inventory = write_inventory(
        tmp_path,
        f"""
        shared = (["gpu-node-03"], {{{A100}, "time_slicing_replicas": 3, "memory_per_share_gib": 26.66}})
        mig = (["gpu-node-04"], {{{A100}, "mig_layout": {{"1g.10gb": 7}}}})
        """,
    )
    result = check(inventory, usage, "--format", "json")
    assert result.exit_code == 1, result.output
    replay = json.loads(result.stdout)
    assert not replay["fits"]
    names = {m["workload"] for m in replay["misfits"]}
    assert "ml-train/llm-pretrain-0-0/trainer" in names
    [job] = [m for m in replay["misfits"] if m["workload"].startswith("ml-train/")]
    assert "needs 8 whole GPUs on one host; the plan's hosts have at most 0" in job["reason"]
    # 24 shares and 56 1g.10gb instances for 30 notebooks of 15-25 GB and 10 services of 2 GB:
    # the services take instances, 24 notebooks the shares, 6 notebooks are left over.
    placed = {p["workload"]: p for p in replay["placements"]}
    assert all(placed[n]["slot"] == "1g.10gb" for n in placed if n.startswith("serving/"))
    assert sum(1 for m in replay["misfits"] if m["workload"].startswith("team-")) == 6
    pools = {p["mode"]: p for p in replay["pools"]}
    assert pools["shared"]["slots"] == 24 and pools["shared"]["slots_peak"] == 24
    assert pools["mig"]["slots"] == 56 and pools["mig"]["slots_peak"] == 10


def test_the_table_says_how_full_each_pool_is(tmp_path):
    usage = small_week(tmp_path, jobs=1, mid=4, churned=0, services=0)
    inventory = write_inventory(
        tmp_path,
        f"""
        whole_card = (["gpu-node-00"], {{{A100}}})
        shared = (["gpu-node-01"], {{{A100}, "time_slicing_replicas": 2}})
        """,
    )
    result = check(inventory, usage)
    assert result.exit_code == 0, result.output
    assert "Every one of the 5 workloads fits." in result.stdout
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[5:7]}
    # the job takes the whole-card host; the 4 notebooks 2 shares each on 2 GPUs (best fit
    # leaves the whole cards alone)
    assert rows["whole_card"][:3] == ["1", "8/8", "8/8"]
    assert rows["shared"][:3] == ["1", "2/8", "4/16"]


def test_an_inventory_without_the_usages_gpu_model_is_bad_input(tmp_path):
    usage = small_week(tmp_path, jobs=0, mid=2, churned=0, services=0)
    inventory = write_inventory(
        tmp_path, 'whole_card = (["h1"], {"gpu_model": "H100-80GB", "gpu_count": 8})\n'
    )
    result = check(inventory, usage)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"error: {inventory}: no host of the usage's GPU model A100-80GB"
    )


def test_a_bad_inventory_is_the_planners_error(tmp_path):
    usage = small_week(tmp_path, jobs=0, mid=2, churned=0, services=0)
    inventory = write_inventory(tmp_path, f'shared = (["h1"], {{{A100}}})\n')
    result = check(inventory, usage)
    assert result.exit_code == 2
    assert "time_slicing_replicas: required for every host in shared" in result.stderr


def test_advise_for_an_inventorys_hosts(tmp_path):
    usage = small_week(tmp_path, jobs=0, mid=6, churned=0, services=0)
    inventory = write_inventory(
        tmp_path, f'whole_card = (["gpu-node-00", "spare-1"], {{{A100}}})\n'
    )
    result = CliRunner().invoke(
        main, ["advise", str(usage), "--inventory", str(inventory), "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    hosts = {h["name"]: h for h in json.loads(result.stdout)["hosts"]}
    assert set(hosts) == {"gpu-node-00", "spare-1"}
    assert hosts["spare-1"]["free"] and hosts["gpu-node-00"]["gpus_used"] == 2  # 6 x R=3
    other = write_inventory(
        tmp_path, 'whole_card = (["h1"], {"gpu_model": "H100-80GB", "gpu_count": 8})\n'
    )
    result = CliRunner().invoke(main, ["advise", str(usage), "--inventory", str(other)])
    assert result.exit_code == 2
    assert "no host of the usage's GPU model A100-80GB to propose for" in result.stderr


def test_progress_goes_to_stderr_only_when_asked(tmp_path, monkeypatch):
    usage = tmp_path / "week.prom"
    samples = write_prometheus(usage, article_cluster(), 170, 3600)
    assert samples > 65536  # readers report every 65536 samples
    quiet = CliRunner().invoke(main, ["advise", str(usage), "--format", "json"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    json.loads(quiet.stdout)  # nothing but the document on stdout
    monkeypatch.setattr("gpuprov.cli.advise.PROGRESS_SECONDS", 0.0)  # a line at every report
    loud = CliRunner().invoke(main, ["advise", str(usage), "--format", "json", "--progress"])
    assert loud.exit_code == 0
    size = usage.stat().st_size // 2**20
    [line] = loud.stderr.splitlines()
    assert re.fullmatch(
        rf"{re.escape(str(usage))}: 65,536 samples, \d+ of {size} MB \(\d+%\)", line
    )
    json.loads(loud.stdout)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 200000, allow_nan=False), min_size=1, max_size=300), st.floats(1, 100))
def test_the_sketch_percentile_is_never_below_the_true_one_nor_a_bucket_above(values, p):
    sketch = Sketch(64)
    for v in values:
        sketch.add(v)
    ordered = sorted(values)
    true = ordered[math.ceil(len(ordered) * p / 100) - 1]
    assert true <= sketch.percentile(p) <= true + 64 + 1e-6
    assert sketch.peak == max(values) and sketch.count == len(values)


def demand(name, mib, compute=0.05, start=0, end=10, gpus=1, whole=None):
    return Demand(name, gpus, mib, compute, compute, start, end, whole, "n", None)


def test_the_lp_bound_counts_the_half_card_shares_the_simple_bound_misses():
    a100 = catalog.find_model("A100-80GB")
    # 41 GiB each: a share of two (40 GiB) does not hold it, nor any MIG instance.
    big = [demand(f"w{i}", 41 * 1024 - 100) for i in range(3)]
    # 0.49 of a card each: memory says 2 GPUs for 3, but no GPU holds two of them.
    assert simple_bound(big, a100, 0.8).gpus == 2
    assert lp_bound(big, a100, 0.8).gpus == 3
    # Workloads that never run at once count once.
    apart = [demand("a", 30000, start=0, end=10), demand("b", 30000, start=20, end=30)]
    assert simple_bound(apart, a100, 0.8).gpus == 1


def test_without_scipy_the_lp_bound_says_so_and_advise_still_works(tmp_path):
    usage = small_week(tmp_path, jobs=0, mid=4, churned=0, services=0)
    code = (
        "import sys; sys.modules['scipy'] = None\n"
        "from gpuprov.cli import main\n"
        f"main(['advise', {str(usage)!r}, '--format', 'json'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    bounds = json.loads(out.stdout)["summary"]["bounds"]
    assert bounds[1]["gpus"] == 0
    assert bounds[1]["note"] == "scipy is not installed: pip install 'gpuprov[advise]'"
