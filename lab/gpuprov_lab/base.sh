#!/bin/bash
# base.sh DIR MIRROR NODE_FILES: build the lab's read-only base rootfs at DIR (atomically).
# The host paths and unit names gpuprov's contract defines come in the environment (base.py):
# APT_SOURCES_DIR, CONTAINERD_CONFIG, CONTAINERD_UNIT.
#
# Debian bookworm minbase + systemd, sshd, python3, containerd, crun, the CNI plugins and the
# static busybox (the lab's canary image is made of it: gpuprov/lab/images.py), the
# kubeadm-style containerd config, the lab's runc (crun without cgroups) and the lspci of the
# simulated PCI bus, from NODE_FILES. Every lab host is an overlay on top of
# this directory. The kubelet and NVIDIA's device plugin are not in it: each host gets the real
# ones (read-only binds of the cached builds) and their units at `up` (lab/gpuprov_lab/hosts.py).
#
#   bash lab/gpuprov_lab/base.sh /var/tmp/gpuprov-lab-base-1a2b3c4d http://deb.debian.org lab/gpuprov_lab/node
set -euo pipefail

BASE=$1 MIRROR=$2 NODE=$3
: "${APT_SOURCES_DIR:?}" "${CONTAINERD_CONFIG:?}" "${CONTAINERD_UNIT:?}"
GW=10.200.0.1
TMP=$BASE.tmp

rm -rf "$TMP"
mmdebstrap --quiet --variant=minbase \
  --include=systemd,systemd-sysv,dbus,openssh-server,python3,python3-yaml,iproute2,procps,kmod,ca-certificates,containerd,runc,crun,containernetworking-plugins,busybox-static \
  bookworm "$TMP" \
  "deb $MIRROR/debian bookworm main" \
  "deb $MIRROR/debian bookworm-updates main" \
  "deb $MIRROR/debian-security bookworm-security main"

rm -f "$TMP"/etc/ssh/ssh_host_*                     # generated per host (ed25519 only: fast)
echo "nameserver $GW" > "$TMP/etc/resolv.conf"      # nothing answers there: lookups fail at once
# Every Debian package a lab host needs is in this base (the --include list above); the deploy
# installs only packages of the lab's own repositories, served on $GW. So hosts get no Debian
# source and no proxy: `apt-get update` on 16 or 32 hosts at once fetches only from the lab's
# HTTP server, with nothing to download from the internet (lab/gpuprov_lab/services.py).
rm -f "$TMP/etc/apt/sources.list" "$TMP$APT_SOURCES_DIR"/*
# Without these, every host's first `apt-get update` adds translations and caches.
printf 'Acquire::Languages "none";\nDir::Cache::srcpkgcache "";\n' \
  > "$TMP/etc/apt/apt.conf.d/02gpuprov-lab-slim"

install -m755 "$NODE/lspci" "$TMP/usr/local/bin/lspci"   # lists the per-host simulated PCI bus
# Pods: the low-level runtime that works in a host (crun, no cgroups: see the script), and the
# CNI plugins where containerd looks for them (its default bin_dir, /opt/cni/bin; Debian's
# containernetworking-plugins installs them into /usr/lib/cni).
install -m755 "$NODE/runc" "$TMP/usr/local/sbin/runc"
install -d "$TMP/opt/cni"
ln -s /usr/lib/cni "$TMP/opt/cni/bin"
install -d "$TMP/var/lib/kubelet" "$TMP/etc/kubernetes/kubelet.conf.d" "$TMP/etc/nvidia/device-plugin"
install -m644 "$NODE/containerd-config.toml" "$TMP$CONTAINERD_CONFIG"  # kubeadm-style
systemctl --root="$TMP" --quiet enable "$CONTAINERD_UNIT"
# Units that cannot work in a container (no udev, no kernel modules) would mark hosts degraded.
systemctl --root="$TMP" --quiet mask systemd-udevd.service systemd-modules-load.service \
  2>/dev/null || true

mv "$TMP" "$BASE"
