# Kubespray's group_vars/k8s_cluster (its sample's usual keys).
kube_version = "v1.31.4"
kube_network_plugin = "calico"
kube_service_addresses = "10.233.0.0/18"
kube_pods_subnet = "10.233.64.0/18"
kube_network_node_prefix = 24
kube_proxy_mode = "ipvs"
kube_apiserver_port = 6443
kube_owner = "kube"
kube_config_dir = "/etc/kubernetes"
cluster_name = "cluster.local"
dns_mode = "coredns"
container_manager = "containerd"
etcd_deployment_type = "host"
kubeconfig_localhost = True
kubelet_max_pods = 110  # Kubespray's key, with the same meaning in gpuprov
nvidia_accelerator_enabled = True
