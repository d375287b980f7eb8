"""`gpuprov mig export|import`: mig-parted configs from the plan and back.

Every exported config is checked by NVIDIA's real nvidia-mig-parted (v0.9.1, ../shared/bin):
``assert --valid-config`` parses the file with mig-parted's own strict schema, without NVML.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from click.testing import CliRunner
from upstream import upstream_binary

from gpuprov.cli import main
from gpuprov.controller.inventory import load
from gpuprov.core.cluster import mig_parted as partedconfig
from gpuprov.core.errors import InputError
from gpuprov.core.plan import build
from inventories import write_inventory

INVENTORY = """\
    mig = (
        [
            "h100-1",
            "h100-2",
            ("h100-3", {"mig_layout_by_gpu": {1: {"7g.80gb": 1}, 3: {}}}),
            ("a100-1", {"gpu_model": "A100-80GB", "gpu_count": 2}),
            ("a30-1", {"gpu_model": "A30-24GB", "gpu_count": 1,
                       "mig_layout": {"1g.6gb+me": 1, "1g.6gb": 3}}),
        ],
        {"gpu_model": "H100-80GB", "gpu_count": 4,
         "mig_layout": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}},
    )
    shared = (
        ["t4-1", ("a100-2", {"gpu_model": "A100-80GB"})],
        {"gpu_model": "T4", "gpu_count": 1, "time_slicing_replicas": 2},
    )
    whole_card = (["h200-1"], {"gpu_model": "H200-141GB", "gpu_count": 8})
"""


@pytest.fixture
def cluster(tmp_path):
    return build(load(str(write_inventory(tmp_path, INVENTORY))))


def test_one_config_per_distinct_layout_and_a_label_value_per_host(cluster):
    exported = partedconfig.export(cluster.hosts)
    assert exported.host_configs == {
        "h100-1": "all-3g.40gb-2g.20gb-2x1g.10gb",
        "h100-2": "all-3g.40gb-2g.20gb-2x1g.10gb",
        "h100-3": "gpu0.2-3g.40gb-2g.20gb-2x1g.10gb_gpu1-7g.80gb_gpu3-enabled",
        "a100-1": "all-3g.40gb-2g.20gb-2x1g.10gb",
        "a30-1": "all-3x1g.6gb-1g.6gb.me",
        "a100-2": "all-disabled",  # MIG-capable outside mig: gpuprov keeps MIG off
        "h200-1": "all-disabled",
    }  # the T4 cannot do MIG: no config, no label
    configs = exported.document["mig-configs"]
    assert configs["gpu0.2-3g.40gb-2g.20gb-2x1g.10gb_gpu1-7g.80gb_gpu3-enabled"] == [
        {
            "devices": [0, 2],
            "mig-enabled": True,
            "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        },
        {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
        {"devices": [3], "mig-enabled": True, "mig-devices": {}},  # MIG on, no instances
    ]


def test_device_filter_by_pci_id_only_where_models_share_a_config(cluster):
    configs = partedconfig.export(cluster.hosts).document["mig-configs"]
    # The MIG manager's default for any unlabelled node: no filter, whatever the models.
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    shared = configs["all-3g.40gb-2g.20gb-2x1g.10gb"]  # H100-80GB and A100-80GB
    assert [item["device-filter"] for item in shared] == [
        ["0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"],  # H100 SXM/PCIe, H800 both
        ["0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"],  # A100 SXM/PCIe 80GB, A800s
    ]
    assert all("device-filter" not in item for item in configs["all-3x1g.6gb-1g.6gb.me"])


def test_every_exported_config_passes_nvidia_mig_parted(cluster, tmp_path):
    mig_parted = upstream_binary("nvidia-mig-parted")
    exported = partedconfig.export(cluster.hosts)
    path = tmp_path / "config.yaml"
    path.write_text(exported.text())
    for name in exported.document["mig-configs"]:
        result = subprocess.run(
            [str(mig_parted), "assert", "--valid-config", "-f", str(path), "-c", name],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 0, (name, result.stdout, result.stderr)
        assert "Selected MIG configuration is valid" in result.stdout + result.stderr


def test_nvidia_mig_parted_refuses_what_gpuprov_refuses_to_import(tmp_path):
    """The strictness both share: an unknown field is an error."""
    mig_parted = upstream_binary("nvidia-mig-parted")
    path = tmp_path / "config.yaml"
    path.write_text(
        "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
        "      mig-devices: {3g.40gb: 2}\n      placement: 0\n"
    )
    real = subprocess.run(
        [str(mig_parted), "assert", "--valid-config", "-f", str(path), "-c", "x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert real.returncode != 0
    with pytest.raises(InputError, match=r"mig-configs.x\[0\].placement: unexpected field"):
        partedconfig.parse(path.read_text(), str(path))


def test_every_exported_config_imports_back_to_the_planned_layouts(cluster):
    exported = partedconfig.export(cluster.hosts)
    document = partedconfig.parse(exported.text(), "exported")
    for host in cluster.hosts:
        if host.mode != "mig":
            continue
        name = exported.host_configs[host.name]
        imported = partedconfig.import_config(document, "exported", name, host.gpu_model)
        assert imported.model.alias == host.gpu_model
        planned = [g.layout if g.mig_enabled else None for g in host.gpus]
        assert imported.layouts(host.gpu_count) == planned, host.name
        solved = {g.index: g.instances for g in host.gpus}
        for where, instances in imported.placements.items():
            index = 0 if where == "all" else int(where.split()[1])
            assert instances == solved[index]


def test_import_finds_the_model_from_the_device_filter():
    document = partedconfig.parse(
        """
        version: v1
        mig-configs:
          balanced:
            - device-filter: ["0x20B010DE", "0x20B510DE"]
              devices: all
              mig-enabled: true
              mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
            - device-filter: "0x20B010DE"
              devices: all
              mig-enabled: true
              mig-devices: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
        """,
        "f.yaml",
    )
    with pytest.raises(InputError, match="several models .A100-40GB, A100-80GB.; pass --model"):
        partedconfig.import_config(document, "f.yaml")
    imported = partedconfig.import_config(document, "f.yaml", model="A100-40GB")
    # Both entries match the A100-40GB (0x20B010DE); the later one wins, as in mig-parted.
    assert imported.group_data() == {
        "gpu_model": "A100-40GB",
        "mig_layout": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    }


def test_import_refuses_a_layout_that_does_not_fit_with_the_planners_words(tmp_path):
    path = tmp_path / "parted.yaml"
    path.write_text(
        "version: v1\nmig-configs:\n  bad:\n    - devices: [0]\n      mig-enabled: true\n"
        '      mig-devices: {"3g.40gb": 1, "1g.20gb": 3}\n'
    )
    result = CliRunner().invoke(main, ["mig", "import", str(path), "--model", "H100-80GB"])
    assert result.exit_code == 2
    assert result.output == (
        f"error: {path}: config bad: mig-devices: GPU 0: 1 x 3g.40gb + 3 x 1g.20gb does not "
        "fit H100-80GB: needs 10 memory slots, H100-80GB has 8\n"
    )


def test_planner_and_import_word_a_misfit_the_same(tmp_path):
    inventory = write_inventory(
        tmp_path,
        'mig = (["h"], {"gpu_model": "H100-80GB", "gpu_count": 1, "mig_layout": {"4g.40gb": 2}})\n',
    )
    with pytest.raises(InputError) as planned:
        build(load(str(inventory)))
    document = partedconfig.parse(
        "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
        '      mig-devices: {"4g.40gb": 2}\n',
        "f",
    )
    with pytest.raises(InputError) as imported:
        partedconfig.import_config(document, "f", model="H100-80GB")
    assert planned.value.problems[0].message == imported.value.problems[0].message


def test_import_prints_group_data_with_the_solved_placements(tmp_path, cluster):
    path = tmp_path / "parted.yaml"
    path.write_text(partedconfig.export(cluster.hosts).text())
    result = CliRunner().invoke(
        main,
        [
            "mig",
            "import",
            str(path),
            "--config",
            "gpu0.2-3g.40gb-2g.20gb-2x1g.10gb_gpu1-7g.80gb_gpu3-enabled",
            "--model",
            "H100-80GB",
        ],
    )
    assert result.exit_code == 0, result.output
    namespace: dict = {}
    exec(result.stdout, namespace)  # the snippet is a valid group_data/*.py
    assert namespace["gpu_model"] == "H100-80GB"
    assert namespace["mig_layout_by_gpu"] == {
        0: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        1: {"7g.80gb": 1},
        2: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        3: {},
    }
    assert "#   GPU 1: 7g.80gb@0" in result.stdout

    as_yaml = CliRunner().invoke(
        main,
        [
            "mig",
            "import",
            str(path),
            "--config",
            "all-3x1g.6gb-1g.6gb.me",
            "--format",
            "yaml",
            "--model",
            "A30-24GB",
        ],
    )
    assert yaml.safe_load(as_yaml.stdout) == {
        "gpu_model": "A30-24GB",
        "mig_layout": {"1g.6gb": 3, "1g.6gb+me": 1},
    }


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}\n",
            "version: must be v1",
        ),
        ("version: v1\n", "mig-configs: must be a non-empty mapping"),
        ("version: v1\nmig-configs: {a: [{devices: all}]}\n", "mig-enabled: must be true or false"),
        (
            "version: v1\nmig-configs: {a: [{devices: [-1], mig-enabled: false}]}\n",
            "devices: must be all or a non-empty list of GPU indices",
        ),
        (
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, "
            "mig-devices: {1g.10gb: 1}}]}\n",
            "mig-devices: must be empty when mig-enabled is false",
        ),
        ("a: [", "not YAML"),
    ],
)
def test_a_malformed_mig_parted_file_is_refused_by_key(text, message):
    with pytest.raises(InputError, match=message):
        partedconfig.parse(text, "f.yaml")


def test_import_asks_which_config_when_there_are_several(tmp_path, cluster):
    path = tmp_path / "parted.yaml"
    path.write_text(partedconfig.export(cluster.hosts).text())
    result = CliRunner().invoke(main, ["mig", "import", str(path), "--model", "H100-80GB"])
    assert result.exit_code == 2
    assert "pick one with --config" in result.output
    result = CliRunner().invoke(main, ["mig", "import", str(path), "--config", "nope"])
    assert result.exit_code == 2
    assert "no config 'nope'" in result.output


def test_all_disabled_is_always_there_for_unlabelled_nodes(tmp_path):
    inventory = write_inventory(
        tmp_path,
        'mig = (["h"], {"gpu_model": "H100-80GB", "gpu_count": 1, "mig_layout": {"7g.80gb": 1}})\n',
    )
    exported = partedconfig.export(build(load(str(inventory))).hosts)
    assert sorted(exported.document["mig-configs"]) == ["all-7g.80gb", "all-disabled"]


def test_export_prints_the_config_and_each_hosts_label_value(tmp_path, cluster):
    inventory = write_inventory(tmp_path, INVENTORY)
    result = CliRunner().invoke(main, ["mig", "export", str(inventory)])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["version"] == "v1"
    assert "# h100-1: all-3g.40gb-2g.20gb-2x1g.10gb" in result.stderr
    assert "cannot express placements" in result.stderr


@pytest.mark.parametrize(
    "by_gpu, host_config, items",
    [
        (
            {1: {}},
            "gpu0-7g.80gb_gpu1-enabled",
            [
                {"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
                {"devices": [1], "mig-enabled": True, "mig-devices": {}},
            ],
        ),
        (
            {1: None},
            "gpu0-7g.80gb_gpu1-disabled",
            [
                {"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
                {"devices": [1], "mig-enabled": False},
            ],
        ),
        (
            {0: {}, 1: {}},
            "all-enabled",
            [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
        ),
    ],
)
def test_mig_on_without_instances_and_mig_off_round_trip_as_mig_parted_means_them(
    tmp_path, by_gpu, host_config, items
):
    # Before: {1: {}} (MIG on, no instances) was exported as gpu1-disabled (MIG off), and an
    # imported `mig-enabled: false` GPU came back as {} (MIG on); `mig-enabled: true` with empty
    # mig-devices, mig-parted's own `all-enabled`, was refused.
    inventory = write_inventory(
        tmp_path,
        f'mig = (["h"], {{"gpu_model": "H100-80GB", "gpu_count": 2, "mig_layout": {{"7g.80gb": 1}}, '
        f'"mig_layout_by_gpu": {by_gpu!r}}})\n',
    )
    [host] = build(load(str(inventory))).hosts
    exported = partedconfig.export([host])
    assert exported.host_configs == {"h": host_config}
    assert exported.document["mig-configs"][host_config] == items
    path = tmp_path / "parted.yaml"
    path.write_text(exported.text())
    result = CliRunner().invoke(
        main, ["mig", "import", str(path), "--config", host_config, "--model", "H100-80GB"]
    )
    assert result.exit_code == 0, result.output
    data: dict = {}
    exec(result.stdout, data)  # the snippet is group data
    again = write_inventory(
        tmp_path,
        f'mig = (["h"], {{"gpu_count": 2, "gpu_model": {data["gpu_model"]!r}, '
        + ", ".join(f"{k!r}: {data[k]!r}" for k in ("mig_layout", "mig_layout_by_gpu") if k in data)
        + "})\n",
    )
    [replanned] = build(load(str(again))).hosts
    assert [(g.mig_enabled, g.instances) for g in replanned.gpus] == [
        (g.mig_enabled, g.instances) for g in host.gpus
    ]


def test_nvidia_mig_parted_accepts_mig_on_with_no_instances(tmp_path):
    mig_parted = upstream_binary("nvidia-mig-parted")
    path = tmp_path / "config.yaml"
    inventory = write_inventory(
        tmp_path,
        'mig = (["h"], {"gpu_model": "H100-80GB", "gpu_count": 2, "mig_layout": {}, '
        '"mig_layout_by_gpu": {1: None}})\n',
    )
    exported = partedconfig.export(build(load(str(inventory))).hosts)
    path.write_text(exported.text())
    [name] = exported.host_configs.values()
    assert name == "gpu0-enabled_gpu1-disabled"
    result = subprocess.run(
        [str(mig_parted), "assert", "--valid-config", "-f", str(path), "-c", name],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stdout + result.stderr
