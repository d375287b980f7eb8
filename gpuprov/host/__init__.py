"""The host side: everything that runs on a GPU host, and exactly what the agent bundle carries.

Standard library and nvidia-ml-py's ``pynvml`` only. ``contract`` (paths, schemas, names) and
the documents both sides share (the MIG layout, the kubelet checkpoint) live here, so the
controller reads them from the one place the host reads them from.
"""
