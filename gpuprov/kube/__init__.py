"""The cluster side of the plan: Kubernetes objects derived from the same inventory.

Pure core (no pyinfra, no I/O) except ``kubectl.py``, the one edge that runs the client:
``device_plugin`` names each host's device plugin config, ``pools`` its labels and taints,
``helm`` the chart and operator values, ``manifests`` puts them together, ``nodes`` works out
what a Node must change.
"""
