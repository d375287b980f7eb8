"""The deploy: one GPU host brought to its plan, concern by concern (``gpu_node``)."""
