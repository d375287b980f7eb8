"""The agent's commands, run on GPU hosts as ``python3 /usr/lib/gpuprov/agent.pyz``: ``probe``,
``apply`` and ``settle``.

>>> from gpuprov.host.agent.main import main
>>> main(["apply", "--layout", "/etc/gpuprov/mig-layout.json", "--check"])  # doctest: +SKIP
0
"""
