"""A GPU's memory error state through NVML: ECC counts, row remapping, retired pages.

Each reading is a mapping of numbers, ``"not-supported"`` where the GPU does not have the
feature (row remapping on Ampere and newer, page retirement before: NVIDIA GPU Memory Error
Management, https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/supported-gpus.html), or
``{"error": why}`` when NVML failed otherwise. Runs in the probe, inside its one ``nvmlInit``.

>>> read(pynvml.nvmlDeviceGetHandleByIndex(0))["remapped_rows"]       # doctest: +SKIP
{'corrected': 0, 'uncorrected': 1, 'pending': True, 'failure': False}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from gpuprov.host.contract import HEALTH_NOT_SUPPORTED


def read(device: Any) -> dict[str, Any]:
    """The ``ecc_uncorrected``, ``remapped_rows`` and ``retired_pages`` readings of ``device``."""
    return {
        "ecc_uncorrected": _reading(lambda: _ecc(device)),
        "remapped_rows": _reading(lambda: _remapped_rows(device)),
        "retired_pages": _reading(lambda: _retired_pages(device)),
    }


def _reading(call: Callable[[], dict[str, Any]]) -> Any:
    try:
        return call()
    except pynvml.NVMLError_NotSupported:
        return HEALTH_NOT_SUPPORTED
    except pynvml.NVMLError as e:
        return {"error": str(e)}


def _ecc(device: Any) -> dict[str, int]:
    uncorrected = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return {
        "volatile": pynvml.nvmlDeviceGetTotalEccErrors(
            device, uncorrected, pynvml.NVML_VOLATILE_ECC
        ),
        "aggregate": pynvml.nvmlDeviceGetTotalEccErrors(
            device, uncorrected, pynvml.NVML_AGGREGATE_ECC
        ),
    }


def _remapped_rows(device: Any) -> dict[str, Any]:
    corrected, uncorrected, pending, failure = pynvml.nvmlDeviceGetRemappedRows(device)
    return {
        "corrected": corrected,
        "uncorrected": uncorrected,
        "pending": bool(pending),
        "failure": bool(failure),
    }


def _retired_pages(device: Any) -> dict[str, Any]:
    pending = pynvml.nvmlDeviceGetRetiredPagesPendingStatus(device)
    return {
        "single_bit": len(
            pynvml.nvmlDeviceGetRetiredPages(
                device, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
            )
        ),
        "double_bit": len(
            pynvml.nvmlDeviceGetRetiredPages(
                device, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
            )
        ),
        "pending": pending == pynvml.NVML_FEATURE_ENABLED,
    }
