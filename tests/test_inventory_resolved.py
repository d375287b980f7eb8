"""The loader works out pyinfra's data waterfall itself (so `plan` needs no pyinfra); it must
give exactly what pyinfra's own Inventory gives, for every shape of groups and host data."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pyinfra.api import Inventory

from gpuprov.controller.inventory import from_pyinfra, load, resolved

NAMES = st.sampled_from(["h1", "h2", "h3", "h4"])
DATA = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 9), max_size=3)
ENTRY = st.one_of(NAMES, st.tuples(NAMES, DATA))
GROUPS = st.dictionaries(
    st.sampled_from(["mig", "shared", "g1", "g2", "inv"]),
    st.tuples(st.lists(ENTRY, max_size=5), DATA),
    max_size=4,
)


@settings(max_examples=400, deadline=None)
@given(GROUPS, st.lists(ENTRY, max_size=6), DATA, st.one_of(st.none(), DATA))
def test_resolved_is_what_pyinfras_inventory_gives(groups, names, all_data, override):
    ours_hosts, ours_groups = resolved((names, all_data), groups, override)
    theirs = from_pyinfra(
        Inventory((names, all_data), override_data=override, **groups), "x.py", {}
    )
    assert ours_hosts == theirs.hosts
    assert ours_groups == theirs.group_data


def test_the_bundled_inventories_load_as_pyinfra_loads_them():
    for path in ("inventories/example.py", "inventories/kubespray/inventory.py"):
        ours = load(path)
        theirs = from_pyinfra(ours.pyinfra, path, ours.group_files)
        assert (ours.hosts, ours.group_data) == (theirs.hosts, theirs.group_data), path


def test_a_connector_host_is_expanded_by_pyinfra(tmp_path):
    (tmp_path / "inv.py").write_text('whole_card = (["@local"], {"gpu_model": "T4"})\n')
    loaded = load(str(tmp_path / "inv.py"))
    assert [(h.name, h.groups) for h in loaded.hosts] == [("@local", ("whole_card", "inv"))]
