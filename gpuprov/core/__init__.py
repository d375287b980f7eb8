"""The pure core: inventory data -> plan -> what each host and the cluster should look like, and
the comparison with what was observed. Plain data in and out; no SSH, no NVML, no kubectl."""
