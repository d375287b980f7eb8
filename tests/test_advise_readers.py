"""Each usage reader on samples shaped as the real tools write them, and the same week read
from every format giving the same statistics."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from advise_week import (
    article_cluster,
    write_nvidia_smi,
    write_prometheus,
    write_range_csv,
    write_range_json,
)
from click.testing import CliRunner

from gpuprov.cli import main
from gpuprov.cli.advise import read_usage
from gpuprov.core.advise import formats, read_prometheus
from gpuprov.core.advise.reading import ReadOptions
from gpuprov.core.advise.usage import UsageCollector

A100 = (
    'modelName="NVIDIA A100-SXM4-80GB",Hostname="gpu-node-07",DCGM_FI_DRIVER_VERSION="570.172.08"'
)
# Two scrapes of dcgm-exporter's /metrics as `curl` prints them (no timestamps), one GPU with a
# pod, one idle; an unrelated metric in between.
SCRAPE = f"""# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:07:00.0",device="nvidia0",{A100},container="main",namespace="team-a",pod="nb-1"}} 1410
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:07:00.0",device="nvidia0",{A100},container="main",namespace="team-a",pod="nb-1"}} {{used}}
DCGM_FI_DEV_FB_USED{{gpu="1",UUID="GPU-1b2c3d4e-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:0F:00.0",device="nvidia1",{A100},container="",namespace="",pod=""}} 0
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:07:00.0",device="nvidia0",{A100},container="main",namespace="team-a",pod="nb-1"}} 0.125000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="1",UUID="GPU-1b2c3d4e-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:0F:00.0",device="nvidia1",{A100},container="",namespace="",pod=""}} 0.000000
"""


def collect(text: str, name: str = "scrapes.prom", **options):
    collector = UsageCollector()
    summary = read_prometheus.read(io.StringIO(text), name, collector, ReadOptions(**options))
    return summary, collector.result(99)


def test_scrapes_without_timestamps_are_split_where_a_series_comes_again():
    text = SCRAPE.replace("{used}", "20480") + SCRAPE.replace("{used}", "30720")
    summary, usage = collect(text)
    assert summary.samples == 8 and summary.skipped == 2
    [workload] = usage.workloads
    assert workload.name == "team-a/nb-1/main"
    assert (workload.memory_peak, workload.samples, workload.duty) == (30720, 2, 1.0)
    assert workload.compute_mean == pytest.approx(0.125)
    assert usage.step == read_prometheus.UNTIMESTAMPED_STEP
    assert usage.hosts == {"gpu-node-07": 2} and usage.gpus_busy == 1


def test_timestamped_samples_keep_their_times():
    lines = [
        f'DCGM_FI_DEV_FB_USED{{gpu="0",{A100},pod="p",namespace="n"}} {v} {t}'
        for t, v in ((1786000000000, 100), (1786000030000, 300), (1786000060000, 200))
    ]
    _, usage = collect("\n".join(lines) + "\n")
    [w] = usage.workloads
    assert (w.first, w.last, usage.step, w.memory_peak) == (1786000000.0, 1786000060.0, 30.0, 300)


def test_prometheus_renamed_labels_name_the_workload_not_the_exporter():
    line = (
        f'DCGM_FI_DEV_FB_USED{{gpu="0",{A100},pod="dcgm-exporter-7xk2p",namespace="gpu-operator",'
        'exported_pod="vllm-0",exported_namespace="serving",exported_container="engine"} 9000\n'
    )
    _, usage = collect(line)
    assert [w.name for w in usage.workloads] == ["serving/vllm-0/engine"]


def test_label_values_with_escapes_parse():
    line = f'DCGM_FI_DEV_FB_USED{{gpu="0",{A100},pod="a\\"b",namespace="n\\\\s"}} 9000\n'
    _, usage = collect(line)
    assert [w.name for w in usage.workloads] == ['n\\s/a"b']


def test_a_mig_instance_counts_its_compute_as_its_share_of_the_gpu():
    labels = f'gpu="0",{A100},GPU_I_PROFILE="3g.40gb",GPU_I_ID="1",pod="p",namespace="n"'
    text = f"DCGM_FI_DEV_FB_USED{{{labels}}} 30000\nDCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} 0.7\n"
    _, usage = collect(text)
    [w] = usage.workloads
    assert w.mig_profiles == ("3g.40gb",)
    assert w.compute_mean == pytest.approx(0.7 * 3 / 7)


def test_without_pod_labels_every_busy_gpu_is_a_workload():
    text = (
        f'DCGM_FI_DEV_FB_USED{{gpu="0",{A100}}} 30000\n'
        f'DCGM_FI_DEV_FB_USED{{gpu="1",{A100}}} 3\n'  # idle
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",{A100}}} 40\n'
    )
    _, usage = collect(text)
    [w] = usage.workloads
    assert w.name == "gpu-node-07/gpu0" and w.compute_mean == pytest.approx(0.4)
    assert not usage.attributed


@pytest.fixture(scope="module")
def small_week(tmp_path_factory):
    directory = tmp_path_factory.mktemp("formats")
    cluster = article_cluster(seed=3)
    paths = {
        "prometheus-text": directory / "week.prom",
        "prometheus-json": directory / "range.json",
        "prometheus-csv": directory / "range.csv",
        "gzip": directory / "week.prom.gz",
    }
    write_prometheus(paths["prometheus-text"], cluster, 25, 3600)
    write_range_json(paths["prometheus-json"], cluster, 25, 3600)
    write_range_csv(paths["prometheus-csv"], cluster, 25, 3600)
    write_prometheus(paths["gzip"], cluster, 25, 3600, compress=True)
    smi = directory / "smi"
    smi.mkdir()
    write_nvidia_smi(smi, cluster, 25, 3600)
    return cluster, paths, smi


def stats(paths, **options):
    usage, summaries = read_usage([str(p) for p in paths], ReadOptions(**options), 99, False)
    return (
        usage,
        summaries,
        {
            w.name: (
                w.gpus,
                w.memory_peak,
                w.memory_high,
                round(w.memory_mean, 3),
                w.compute_mean and round(w.compute_mean, 6),
                w.samples,
                w.first,
                w.last,
            )
            for w in usage.workloads
        },
    )


def test_the_same_week_reads_the_same_from_text_json_csv_and_gzip(small_week):
    cluster, paths, _ = small_week
    results = {}
    for name, path in paths.items():
        usage, [summary], table = stats([path])
        results[name] = table
        assert summary.format == ("prometheus-text" if name == "gzip" else name)
        assert summary.samples == 2 * 25 * 200
    first = results["prometheus-text"]
    assert len(first) == len(cluster.workloads)
    for name, table in results.items():
        assert table == first, name


def test_nvidia_smi_logs_make_each_busy_gpu_a_workload(small_week):
    cluster, _, smi = small_week
    files = sorted(smi.iterdir())
    usage, summaries, table = stats(files)
    assert {s.format for s in summaries} == {"nvidia-smi-query-gpu"}
    assert len(usage.hosts) == 25 and usage.hosts["gpu-node-00"] == 8
    # the three 8-GPU jobs are 24 GPU workloads here: nvidia-smi names no pod
    busy = {gpu for w in cluster.workloads for gpu in w.gpus}
    assert len(table) == len(busy)
    peak = {gpu: max(w.peak_mib for w in cluster.workloads if gpu in w.gpus) for gpu in busy}
    for (host, index), mib in peak.items():
        assert table[f"{host}/gpu{index}"][1] == mib


def test_nvidia_smi_with_nounits_and_noheader(tmp_path):
    plain = tmp_path / "gpu-07.csv"
    plain.write_text(
        "timestamp, name, index, uuid, utilization.gpu [%], memory.used [MiB]\n"
        "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, 0, GPU-1, 35 %, 7234 MiB\n"
        "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, 1, GPU-2, [N/A], 1 MiB\n"
        "2026/08/17 10:00:15.000, NVIDIA A100-SXM4-80GB, 0, GPU-1, 45 %, 8000 MiB\n"
    )
    nounits = tmp_path / "gpu-08.csv"
    nounits.write_text(
        "timestamp, name, index, uuid, utilization.gpu [%], memory.used [MiB]\n"
        "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, 0, GPU-3, 35, 7234\n"
        "2026/08/17 10:00:15.000, NVIDIA A100-SXM4-80GB, 0, GPU-3, 45, 8000\n"
    )
    bare = tmp_path / "gpu-09.csv"
    bare.write_text("0, GPU-4, 35, 7234\n0, GPU-4, 45, 8000\n")
    usage, summaries, table = stats([plain, nounits], gpu_model="A100-80GB")
    assert table["gpu-07/gpu0"][1:2] == (8000,) and table["gpu-08/gpu0"][1:2] == (8000,)
    assert table["gpu-07/gpu0"][4] == pytest.approx(0.40)
    assert "gpu-07/gpu1" not in table  # idle
    usage, summaries, table = stats(
        [bare], columns=("index", "uuid", "utilization.gpu", "memory.used"), gpu_model="A100-80GB"
    )
    assert table == {"gpu-09/gpu0": (1, 8000, 8000, 7617.0, 0.4, 2, 0.0, 15.0)}


def test_compute_apps_make_each_process_a_workload_with_its_gpus_utilisation(tmp_path):
    gpus = tmp_path / "gpu-07.gpus.csv"
    gpus.write_text(
        "timestamp, name, index, uuid, utilization.gpu [%], memory.used [MiB]\n"
        "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, 0, GPU-a1, 60 %, 30000 MiB\n"
        "2026/08/17 10:00:15.000, NVIDIA A100-SXM4-80GB, 0, GPU-a1, 60 %, 30000 MiB\n"
    )
    apps = tmp_path / "gpu-07.apps.csv"
    # process_name is not quoted by nvidia-smi and may hold commas
    apps.write_text(
        "timestamp, gpu_name, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, GPU-a1, 4242, python3, 20000 MiB\n"
        "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, GPU-a1, 4343, chrome --type=gpu, x, 9000 MiB\n"
        "2026/08/17 10:00:15.000, NVIDIA A100-SXM4-80GB, GPU-a1, 4242, python3, 21000 MiB\n"
    )
    usage, summaries, table = stats([gpus, apps])
    assert [s.format for s in summaries] == [
        "nvidia-smi-query-gpu",
        "nvidia-smi-query-compute-apps",
    ]
    assert set(table) == {"gpu-07/python3[4242]", "gpu-07/chrome --type=gpu, x[4343]"}
    python = next(w for w in usage.workloads if w.name.startswith("gpu-07/python3"))
    assert python.memory_peak == 21000
    assert python.compute_source == "estimated" and python.compute_mean == pytest.approx(0.3)


def test_formats_are_told_from_content_not_the_file_name(tmp_path, small_week):
    _, paths, smi = small_week
    for path in (*paths.values(), next(smi.iterdir())):
        renamed = tmp_path / f"usage-{path.name}.txt"
        renamed.write_bytes(path.read_bytes())
        _, [summary], _ = stats([renamed])
        expected = formats.detect(
            gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        )
        assert summary.format == expected


def test_stdin_is_read_with_a_dash(small_week):
    _, paths, _ = small_week
    result = CliRunner().invoke(
        main, ["advise", "-", "--format", "json"], input=paths["prometheus-csv"].read_bytes()
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"][0]["file"] == "<stdin>"


def test_a_range_query_of_a_function_needs_the_metric_named(tmp_path):
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {
                        "Hostname": "n1",
                        "gpu": "0",
                        "modelName": "NVIDIA A100-SXM4-80GB",
                        "pod": "p",
                    },
                    "values": [[1786000000, "20000"], [1786000300, "22000"]],
                }
            ],
        },
    }
    path = tmp_path / "max_over_time.json"
    path.write_text(json.dumps(body))
    usage, _, table = stats([path], metric="DCGM_FI_DEV_FB_USED")
    assert table["p"][1] == 22000
