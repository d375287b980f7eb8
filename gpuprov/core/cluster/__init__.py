"""The cluster side of the plan, pure: Kubernetes objects derived from it, and the comparison
of what the API server shows with it."""
