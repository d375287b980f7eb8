"""`gpuprov advise`: from a week of GPU usage to the inventory groups that would pack it.

The flow, one module per step, all pure (the command line opens the files):

- ``formats`` tells a usage file's format from its first bytes; one reader per format turns it
  into samples: ``read_prometheus`` (DCGM exporter scrapes), ``read_range_json`` and
  ``read_range_csv`` (a Prometheus range query), ``read_nvidia_smi`` (``--query-gpu`` and
  ``--query-compute-apps`` CSV);
- ``usage`` folds the samples, as they stream, into fixed-size statistics per workload and per
  GPU (``sketch``: a histogram for percentiles, the exact peak);
- ``demand`` sizes each workload (memory at its peak or percentile plus headroom, compute);
- ``packing`` places demands on GPUs: time-sliced shares, MIG instances, whole cards;
- ``proposal`` picks the mode groups and their data; ``inventory_text`` writes them as an
  inventory ``gpuprov plan`` reads; ``bounds`` says how far the proposal is from the best
  possible; ``replay`` places the same usage on an existing plan.
"""
