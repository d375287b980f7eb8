"""The host contract is defined once: every host path, schema name, environment variable and
file name of gpuprov/host/contract.py appears as a literal only there; the rest of the code imports it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gpuprov.host import contract

ROOT = Path(__file__).resolve().parents[1]
# Templates and shell scripts: they cannot import the contract, so what they need of it is
# handed to them (template variables, arguments, environment).
TEXTS = sorted(
    {
        p
        for top in ("templates", "gpuprov", "lab", "deploys", "bench")
        for pattern in ("*.j2", "*.sh")
        for p in (ROOT / top).rglob(pattern)
    }
)
# The lab's stand-ins for other vendors' files (the simulated NVIDIA packages' scripts and units,
# a node's containerd config): they spell their own names as the real ones do
# (nvidia-persistenced.service, /dev/nvidia*, /dev/kmsg), but gpuprov's own names only as handed
# to them (``@MIG_UNIT@``, filled in by gpuprov_lab.packages).
STAND_INS = sorted(
    p
    for folder in ("lab/gpuprov_lab/packages", "lab/gpuprov_lab/node")
    for p in (ROOT / folder).rglob("*")
    if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
)
CODE = [
    p
    for top in ("gpuprov", "lab", "deploys", "bench")
    for p in sorted((ROOT / top).rglob("*.py"))
    if p != Path(contract.__file__)
]
# Literals that name a piece of the contract unambiguously: paths, schemas, variables, file names.
_DISTINCT = re.compile(
    r"^(/|gpuprov\.[a-z-]+/v\d|GPUPROV_|io\.containerd\.)|\.(conf|toml|service|json)$"
)


def contract_literals() -> dict[str, str]:
    """value -> constant name, for every string constant of the contract worth tracking."""
    out = {}
    for name in dir(contract):
        value = getattr(contract, name)
        if (
            name.isupper()
            and isinstance(value, str)
            and _DISTINCT.search(value)
            and not value.startswith(".")  # a bare suffix (".json") names nothing by itself
        ):
            out[value] = name
        elif name.isupper() and isinstance(value, dict):
            out.update({v: name for v in value.values() if isinstance(v, str) and "." in v})
        elif name.isupper() and isinstance(value, tuple | list | frozenset):
            out.update({v: name for v in value if isinstance(v, str) and _DISTINCT.search(v)})
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _spelled(value: str) -> re.Pattern[str]:
    # As a whole token: `nvidia-container-runtime-hook` is not the runtime's path.
    return re.compile(re.escape(value) + r"(?![\w.-])")


def text_uses(path: Path, literals: dict[str, str], root: Path = ROOT) -> list[str]:
    """Each line of a template or shell script that spells out a contract literal."""
    path = root / path
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for value, name in literals.items():
            if _spelled(value).search(line):
                found.append(f"{path.relative_to(root)}:{number}: {value!r} ({name})")
    return found


def literal_uses(path: Path, literals: dict[str, str]) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for value, name in literals.items():
                if _spelled(value).search(node.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {value!r} ({name})")
    return found


def test_the_contract_has_the_literals_the_check_looks_for():
    literals = contract_literals()
    assert "/etc/gpuprov/mig-layout.json" in literals
    assert "gpuprov.probe/v1" in literals
    assert "nvidia-persistenced.service" in literals
    assert not [v for v in literals if "nvidia-sim" in v or "GPUPROV_NVML_SIM" in v]  # the lab's
    assert "io.containerd.grpc.v1.cri" in literals


def test_a_contract_literal_outside_the_contract_is_found(tmp_path):
    rogue = ROOT / "gpuprov" / "_rogue_for_test.py"
    try:
        rogue.write_text(
            '"""Doc: /etc/gpuprov/mig-layout.json is fine here."""\nX = "/etc/gpuprov/mig-layout.json"\n'
        )
        found = literal_uses(rogue, contract_literals())
    finally:
        rogue.unlink()
    assert found == [
        "gpuprov/_rogue_for_test.py:2: '/etc/gpuprov/mig-layout.json' (MIG_LAYOUT_PATH)"
    ]


def test_host_paths_schemas_and_names_appear_only_in_the_contract_module():
    literals = contract_literals()
    found = [use for path in CODE for use in literal_uses(path, literals)]
    assert found == []


def test_the_contract_tracks_its_tuple_constants():
    literals = contract_literals()
    assert literals["dcgm-exporter.service"] == "GPU_CLIENT_UNITS"


def test_templates_and_shell_scripts_are_searched():
    assert ROOT / "templates" / "gpuprov-mig.service.j2" in TEXTS
    assert ROOT / "lab" / "gpuprov_lab" / "base.sh" in TEXTS


def test_a_contract_literal_in_a_template_is_found(tmp_path):
    rogue = tmp_path / "rogue.service.j2"
    rogue.write_text("[Unit]\nAfter=nvidia-persistenced.service\nBefore={{ kubelet }}\n")
    found = text_uses(rogue.relative_to(tmp_path), contract_literals(), root=tmp_path)
    assert found == ["rogue.service.j2:2: 'nvidia-persistenced.service' (PERSISTENCED_UNIT)"]


def test_host_paths_and_names_appear_in_no_template_or_shell_script():
    literals = contract_literals()
    found = [use for path in TEXTS for use in text_uses(path, literals)]
    assert found == []


def gpuprovs_own(literals: dict[str, str]) -> dict[str, str]:
    """The contract literals that are gpuprov's own names (its units, paths, schemas, variables),
    not another program's that gpuprov reads."""
    return {v: n for v, n in literals.items() if "gpuprov" in v.lower()}


def test_the_lab_stand_ins_are_searched_for_gpuprovs_own_names():
    own = gpuprovs_own(contract_literals())
    assert "gpuprov-mig.service" in own and "nvidia-persistenced.service" not in own
    assert ROOT / "lab/gpuprov_lab/packages/driver/nvidia-sim-boot.service" in STAND_INS
    assert ROOT / "lab/gpuprov_lab/packages/driver/postinst" in STAND_INS


def test_gpuprovs_own_names_appear_in_no_lab_stand_in():
    own = gpuprovs_own(contract_literals())
    found = [use for path in STAND_INS for use in text_uses(path, own)]
    assert found == []
