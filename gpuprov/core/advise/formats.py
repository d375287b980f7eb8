"""Which reader a usage file needs, told from its first bytes, not its name.

>>> detect(b'# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\\n')
'prometheus-text'
>>> detect(b'{"status":"success","data":{"resultType":"matrix"')
'prometheus-json'
>>> detect(b'index, uuid, memory.used [MiB]\\n0, GPU-1, 7234 MiB\\n')
'nvidia-smi-query-gpu'
>>> try:
...     detect(b'name,age\\nbob,3\\n')
... except UnknownFormat as e:
...     print(e)
line 1: not a usage file advise reads: a CSV whose header is neither a Prometheus range query's (timestamp, __name__, labels, value) nor nvidia-smi's (memory.used or used_gpu_memory)
"""

from __future__ import annotations

import csv
import re

from gpuprov.core.advise import read_nvidia_smi, read_prometheus, read_range_csv, read_range_json
from gpuprov.core.errors import shown

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024  # how much of a file detection looks at
FORMATS = (
    read_prometheus.FORMAT,
    read_range_json.FORMAT,
    read_range_csv.FORMAT,
    read_nvidia_smi.FORMAT_GPU,
    read_nvidia_smi.FORMAT_APPS,
)
_SAMPLE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?\s+\S+(\s+-?\d+)?\s*\Z")


class UnknownFormat(ValueError):
    """The file is none of the formats; the message names the line."""


def detect(head: bytes, columns: tuple[str, ...] = ()) -> str:
    """The format of a file that begins with ``head`` (decompressed); ``columns`` are the
    fields of a headerless nvidia-smi log."""
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        raise UnknownFormat("empty: no usage samples")
    if stripped[0] in "{[":
        return read_range_json.FORMAT
    lineno, first = next(
        ((n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()), (1, "")
    )
    if first.startswith("#") or _SAMPLE.match(first.strip()):
        return read_prometheus.FORMAT
    header = next(csv.reader([first], skipinitialspace=True))
    if read_range_csv.looks_like(header):
        return read_range_csv.FORMAT
    if columns:
        header = list(columns)
    if read_nvidia_smi.looks_like(header):
        fields = {read_nvidia_smi.field_of(c) for c in header}
        apps = bool(fields & {*read_nvidia_smi.APP_MEMORY, "pid"})
        return read_nvidia_smi.FORMAT_APPS if apps else read_nvidia_smi.FORMAT_GPU
    if len(header) > 1 and _data_like(header):
        raise UnknownFormat(
            f"line {lineno}: CSV without a header ({shown(first[:80])}): nvidia-smi with "
            "noheader needs its fields named, --columns index,uuid,memory.used,..."
        )
    if len(header) > 1:
        raise UnknownFormat(
            f"line {lineno}: not a usage file advise reads: a CSV whose header is neither a "
            "Prometheus range query's (timestamp, __name__, labels, value) nor nvidia-smi's "
            "(memory.used or used_gpu_memory)"
        )
    raise UnknownFormat(
        f"line {lineno}: not a usage file advise reads (DCGM exporter Prometheus text, a "
        f"Prometheus query's JSON or CSV, nvidia-smi CSV): {shown(first[:80])}"
    )


def _data_like(cells: list[str]) -> bool:
    """A row of values (numbers, units, dates), not of field names."""
    return any(re.match(r"\s*[-+\d\[]", c) for c in cells)
