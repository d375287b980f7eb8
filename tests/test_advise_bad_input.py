"""Bad usage input: one message naming the file and the line, exit 2, never a traceback, no
inventory written."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from gpuprov.cli import main

LABELS = 'gpu="0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1",pod="p",namespace="ns"'
GOOD = f"DCGM_FI_DEV_FB_USED{{{LABELS}}} 20480 1786000000000\n"


def refused(tmp_path, name: str, content, *args: str) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    output = tmp_path / "advised.py"
    result = CliRunner().invoke(main, ["advise", str(path), "-o", str(output), *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith(f"error: {path}: "), line
    assert not output.exists()
    return line.removeprefix(f"error: {path}: ")


@pytest.mark.parametrize(
    "second, expected",
    [
        (f"DCGM_FI_DEV_FB_USED{{{LABELS}}} -5 1786000015000", "line 2: negative sample -5.0"),
        (f"DCGM_FI_DEV_FB_USED{{{LABELS}}} NaN 1786000015000", "line 2: missing (NaN) sample"),
        (f"DCGM_FI_DEV_FB_USED{{{LABELS}}} 12x 1786000015000", "line 2: not a number"),
        (f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{LABELS}}} 1.7 1786000015000", "line 2: 1.7 is above"),
        (f"DCGM_FI_DEV_FB_USED{{{LABELS}}} 20480", "line 2: this sample has no timestamp"),
        ('DCGM_FI_DEV_FB_USED{gpu="0",pod="p"} 1 1786000015000', "line 2: no Hostname label"),
        ("DCGM_FI_DEV_FB_USED 1 1786000015000", "line 2: a DCGM sample without labels"),
        (f"DCGM_FI_DEV_FB_USED{{{LABELS},x=unquoted}} 1 1786000015000", "line 2: malformed labels"),
        ("not a metric line at all", "line 2: not Prometheus text exposition"),
    ],
)
def test_bad_prometheus_lines_are_named(tmp_path, second, expected):
    assert refused(tmp_path, "week.prom", GOOD + second + "\n").startswith(expected)


def test_two_gpu_models_in_one_pool_are_refused_naming_both_places(tmp_path):
    h100 = LABELS.replace("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3").replace('"n1"', '"n2"')
    message = refused(
        tmp_path, "week.prom", GOOD + f"DCGM_FI_DEV_FB_USED{{{h100}}} 1 1786000000000\n"
    )
    assert message.startswith("line 2: GPU model H100-80GB, but ")
    assert "week.prom: line 1 is A100-80GB: advise sizes one pool of one GPU model" in message


def test_an_unknown_gpu_model_is_refused_with_the_likely_one(tmp_path):
    labels = LABELS.replace("NVIDIA A100-SXM4-80GB", "A100-80G")
    message = refused(tmp_path, "week.prom", f"DCGM_FI_DEV_FB_USED{{{labels}}} 1 1786000000000\n")
    assert message.startswith("line 1: unknown GPU model 'A100-80G'; did you mean A100-80GB")


def test_gpu_utilisation_of_a_mig_instance_is_refused(tmp_path):
    mig = LABELS + ',GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"'
    message = refused(tmp_path, "week.prom", f"DCGM_FI_DEV_GPU_UTIL{{{mig}}} 40 1786000000000\n")
    assert message.startswith("line 1: DCGM_FI_DEV_GPU_UTIL is not measured per MIG instance")


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("inv.py", "shared = (['n1'], {'gpu_model': 'A100-80GB'})\n", "line 1: not a usage file"),
        ("values.yaml", "mig:\n  strategy: mixed\n", "line 1: not a usage file"),
        ("people.csv", "name,age\nbob,3\n", "line 1: not a usage file advise reads: a CSV"),
        ("empty.prom", "", "empty: no usage samples"),
        ("bare.csv", "0, GPU-1, 35, 7234\n", "line 1: CSV without a header"),
    ],
)
def test_a_file_of_another_format_is_refused(tmp_path, name, content, expected):
    assert refused(tmp_path, name, content).startswith(expected)


def test_nvidia_smi_bad_columns_and_values(tmp_path):
    header = "timestamp, name, index, memory.used [MiB]\n"
    row = "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, 0, {} MiB\n"
    assert refused(tmp_path, "a.csv", header + row.format(-3)).startswith(
        "line 2: negative sample -3.0"
    )
    assert refused(tmp_path, "b.csv", header + row.format("[N/A]").replace(" MiB", "")).startswith(
        "line 2: memory.used is missing ('[N/A]')"
    )
    assert refused(
        tmp_path, "c.csv", header + "2026/08/17 10:00:00.000, NVIDIA A100-SXM4-80GB, 0\n"
    ) == ("line 2: 3 cells, the header has 4")
    assert refused(
        tmp_path, "d.csv", "index, Memory Used, memory.used [MiB]\n0, 1, 1 MiB\n"
    ).startswith("line 1: unknown column 'Memory Used'")
    assert refused(
        tmp_path, "e.csv", header + row.format(5).replace("2026/08/17", "17.08.2026")
    ).startswith("line 2: not a number or time")
    assert refused(tmp_path, "f.csv", "index, memory.used [MiB]\n0, 1 MiB\n").startswith(
        "line 2: no GPU model: add name to the query or give --gpu-model"
    )


def test_range_csv_bad_columns_and_cells(tmp_path):
    header = "timestamp,__name__,Hostname,gpu,modelName,pod,value\n"
    row = "1786000000,DCGM_FI_DEV_FB_USED,n1,0,NVIDIA A100-SXM4-80GB,p,{}\n"
    assert (
        refused(tmp_path, "a.csv", header + row.format(""))
        == "line 2: missing value (an empty cell)"
    )
    assert refused(tmp_path, "b.csv", header + row.format(-1)).startswith("line 2: negative sample")
    assert refused(tmp_path, "c.csv", header.replace("pod", "pod name") + row.format(1)).startswith(
        "line 1: unknown column 'pod name'"
    )
    assert refused(tmp_path, "d.csv", header + row.format(1) + "1786000015,x\n") == (
        "line 3: 2 cells, the header has 7"
    )


def test_range_json_that_is_not_a_query_result(tmp_path):
    assert refused(tmp_path, "a.json", '{"hello": "world"}').startswith("no data.resultType")
    assert refused(
        tmp_path, "b.json", '{"status": "success", "data": {"resultType": "matrix", "result": ['
    ).startswith("not JSON")
    assert refused(
        tmp_path, "c.json", '{"status":"error","errorType":"bad_data","error":"parse error"}'
    ).startswith("at the start: the query failed: 'parse error'")
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {
                        "__name__": "DCGM_FI_DEV_FB_USED",
                        "Hostname": "n1",
                        "gpu": "0",
                        "modelName": "NVIDIA A100-SXM4-80GB",
                        "pod": "p",
                    },
                    "values": [[1786000000, "1"], [1786000015, "-2"]],
                }
            ],
        },
    }
    assert (
        refused(tmp_path, "d.json", json.dumps(body)) == "series 1, sample 2: negative sample -2.0"
    )
    body["data"]["result"][0]["metric"].pop("__name__")
    assert refused(tmp_path, "e.json", json.dumps(body)).startswith(
        "series 1: a series without __name__"
    )


def test_a_truncated_gzip_file_is_refused(tmp_path):
    data = gzip.compress((GOOD * 2000).encode())
    assert refused(tmp_path, "week.prom.gz", data[: len(data) // 2]).startswith("cannot read")


def test_a_missing_file_is_refused(tmp_path):
    result = CliRunner().invoke(main, ["advise", str(tmp_path / "nope.prom")])
    assert (
        result.exit_code == 2 and result.stderr == f"error: {tmp_path / 'nope.prom'}: not found\n"
    )


def test_not_utf8_is_refused_with_its_line(tmp_path):
    assert refused(tmp_path, "week.prom", GOOD.encode() + b"DCGM_\xff\n").startswith(
        "line 2: not UTF-8 text"
    )
