# Kubespray's group_vars/all (its sample's usual keys) and pyinfra's connection settings.
ssh_user = "ubuntu"
bin_dir = "/usr/local/bin"
loadbalancer_apiserver_port = 6443
upstream_dns_servers = ["8.8.8.8", "8.8.4.4"]
ntp_enabled = False
unsafe_show_logs = False
# An Ansible role's variable that shares gpuprov's `gpu_` prefix.
gpu_driver_branch = "550"

# gpuprov: the same driver on every GPU host.
driver_version = "550.127.05"
