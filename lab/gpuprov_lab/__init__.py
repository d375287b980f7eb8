"""gpuprov-lab: throwaway SSH hosts with simulated GPUs in a real Kubernetes cluster, on one
machine (`gpuprov lab up`), the simulated NVIDIA driver they run, and the test harness.

A client of gpuprov, shipped as its own distribution: gpuprov's wheel and its agent bundle
hold none of it.
"""
