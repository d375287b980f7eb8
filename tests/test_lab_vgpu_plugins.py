"""The lab's units and configs for HAMi's and Volcano's real device plugins
(gpuprov_lab.vgpu_plugin_service): what each chart would mount, where it mounts it."""

from __future__ import annotations

import yaml
from gpuprov_lab import vgpu_plugin_service as service


def test_hami_reads_its_device_config_and_node_config_where_the_chart_mounts_them():
    unit = service.unit("hami", "lab-a100-01")
    assert "ExecStart=/usr/bin/hami-device-plugin --config-file=/device-config.yaml" in unit
    assert f"BindReadOnlyPaths={service.HAMI_DEVICE_CONFIG}:/device-config.yaml" in unit
    assert f"BindReadOnlyPaths={service.MOUNTS['hami']}:/config" in unit
    assert "Environment=NODE_NAME=lab-a100-01" in unit


def test_volcano_takes_no_config_file_flag_and_reads_its_device_config_from_the_api():
    unit = service.unit("volcano", "n1")
    assert "ExecStart=/usr/bin/volcano-vgpu-device-plugin\n" in unit
    assert "Environment=DEVICE_CONFIG_NAMESPACE=kube-system" in unit


def test_volcano_device_config_is_the_charts_defaults_with_gpuprovs_values_over_them():
    values = {"deviceConfig": {"nvidia": {"gpuMemoryFactor": 64, "deviceSplitCount": 6}}}
    nvidia = yaml.safe_load(service.device_config("volcano", values))["nvidia"]
    assert (nvidia["gpuMemoryFactor"], nvidia["deviceSplitCount"]) == (64, 6)
    assert nvidia["resourceMemoryName"] == "volcano.sh/vgpu-memory"


def test_hami_device_config_keeps_the_charts_split_for_the_node_config_to_override():
    nvidia = yaml.safe_load(service.device_config("hami", {"devicePlugin": {}}))["nvidia"]
    assert (nvidia["resourceCountName"], nvidia["deviceSplitCount"]) == ("nvidia.com/gpu", 10)
