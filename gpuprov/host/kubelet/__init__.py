"""The kubelet as the host sees it: its device-manager checkpoint, the plugin sockets, the wait
for the planned devices."""
