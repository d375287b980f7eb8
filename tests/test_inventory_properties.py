"""Generated inventories: never a traceback, never a plan for a malformed one, bounded time.

The planner is called as the CLI calls it (load, then build), in-process, on files written to a
fresh directory per example. Hypothesis' deadline bounds each example's run time.
"""

from __future__ import annotations

import tempfile
import textwrap
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprov.controller.inventory import load
from gpuprov.core.errors import InputError
from gpuprov.core.plan import build
from gpuprov.core.variables import VARIABLES
from gpuprov.host.contract import MODES

BOUNDED = settings(
    max_examples=60,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.too_slow],
)

# Python expressions as source text, so values repr() cannot write (10**5000) are reachable.
LEAVES = st.one_of(
    st.sampled_from(
        [
            "None",
            "True",
            "0",
            "-1",
            "10**5000",
            "2**31",
            "1.5",
            "float('nan')",
            "object()",
            "print",
            "b'x'",
            "()",
            "[]",
            "{}",
            "set()",
            "...",
            "'A100-80GB'",
            "'T4'",
            "8",
            "2",
        ]
    ),
    st.integers(-(10**40), 10**40).map(str),
    st.text(max_size=12).map(repr),
)
EXPRESSIONS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(inner, max_size=4).map(lambda xs: "(" + "".join(x + ", " for x in xs) + ")"),
        st.lists(st.tuples(inner, inner), max_size=3).map(
            lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}"
        ),
    ),
    max_leaves=12,
)
GROUP_NAMES = st.sampled_from([*MODES, "all", "gpus", "control_plane", "_private"])
KEYS = st.one_of(
    st.sampled_from(sorted(VARIABLES)),
    st.sampled_from(sorted(VARIABLES)).map(str.upper),
    st.sampled_from(["kube_version", "ssh_user", "gpu_driver_branch", "gpuprov_x", "_sudo"]),
)
ASSIGNMENTS = st.lists(
    st.tuples(GROUP_NAMES, EXPRESSIONS).map(lambda kv: f"{kv[0]} = {kv[1]}"), max_size=5
)
GROUP_DATA = st.lists(st.tuples(KEYS, EXPRESSIONS).map(lambda kv: f"{kv[0]} = {kv[1]}"), max_size=5)


def plan_files(inventory: bytes, group_files: dict[str, bytes]) -> list[str] | None:
    """Plan ``inventory`` in a fresh directory: None if it plans, else the error lines."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / "group_data").mkdir()
        for group, text in group_files.items():
            (root / "group_data" / f"{group}.py").write_bytes(text)
        (root / "inv.py").write_bytes(inventory)
        try:
            build(load(str(root / "inv.py")))
        except InputError as e:
            lines = [f"error: {p}" for p in e.problems]
            assert lines
            for line in lines:
                assert "\n" not in line and line.replace(" ", "").isprintable(), line
            return lines
    return None


@BOUNDED
@given(ASSIGNMENTS, st.dictionaries(GROUP_NAMES, GROUP_DATA, max_size=3))
def test_any_inventory_plans_or_is_refused_never_a_traceback(assignments, group_data):
    plan_files(
        "\n".join(assignments).encode(),
        {group: "\n".join(lines).encode() for group, lines in group_data.items()},
    )


VALID = textwrap.dedent("""\
    whole_card = ["n1", ("n2", {"drain_timeout": "60s"})]
    mig = (["n3"], {"gpu_model": "A100-80GB", "gpu_count": 2,
                    "mig_layout": {"3g.40gb": 1, "4g.40gb": 1}})
    """)
VALID_GROUP = 'gpu_model = "T4"\ngpu_count = 2\n'


def test_the_valid_base_plans():
    assert plan_files(VALID.encode(), {"whole_card": VALID_GROUP.encode()}) is None


# Values no gpuprov key accepts.
INVALID_VALUES = st.sampled_from(
    ["10**30", "-5", "'x\\ny'", "object()", "[1, 2]", "{'a': 1}", "''", "'\\x1b[2J'", "1.5"]
)
# Keys whose checks refuse every value above (None, bools and plain strings are valid for some).
STRICT_KEYS = st.sampled_from(
    [
        "gpu_count",
        "drain_timeout",
        "kubelet_max_pods",
        "mig_layout_by_gpu",
        "container_runtime",
        "containerd_config_path",
        "driver_source",
        "kube_node_name",
    ]
)
MALFORMATIONS = st.one_of(
    # a gpuprov key with a value its check refuses, in a group file
    st.tuples(STRICT_KEYS, INVALID_VALUES).map(lambda kv: ("group", f"{kv[0]} = {kv[1]}\n")),
    # a near miss of a gpuprov key
    st.sampled_from(sorted(VARIABLES)).map(lambda k: ("group", f"{k.upper()} = 1\n")),
    # a mode group that is not a group
    st.tuples(st.sampled_from(MODES), st.sampled_from(["5", "'n9'", "None", "{}"])).map(
        lambda kv: ("inventory", f"{kv[0]} = {kv[1]}\n")
    ),
    # group and host shapes
    st.sampled_from(
        [
            "shared = ()\n",
            "shared = (['n9'], {}, {})\n",
            "shared = [('n9', 'x')]\n",
            "shared = ['']\n",
            "shared = ['n\\n9']\n",
            "shared = [7]\n",
            "shared = [('n9',)]\n",
            "gpus = (['n9'], {'gpu_model': 'T4'})\n",
            "import sys; sys.exit(3)\n",
            "raise ValueError('x')\n",
            "shared = (\n",
        ]
    ).map(lambda text: ("inventory", text)),
    # bytes that are not UTF-8 Python source
    st.sampled_from([b"\0", b"\xff", b"\xc3(", b"\xed\xa0\x80"]).map(lambda b: ("bytes", b)),
)


@BOUNDED
@given(MALFORMATIONS)
def test_a_malformed_inventory_never_plans(malformation):
    where, text = malformation
    inventory = VALID.encode()
    group = VALID_GROUP.encode()
    if where == "group":
        group += text.encode()
    elif where == "inventory":
        inventory += text.encode()
    else:
        inventory += b"x = 1 # " + text + b"\n"
    errors = plan_files(inventory, {"whole_card": group})
    assert errors, malformation
