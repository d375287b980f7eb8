#!/bin/bash
# launcher.sh NSPAWN_PIDFILE NSPAWN_ARGV...: boot one lab host, and boot it again after a reboot.
#
# systemd-nspawn exits with 133 when the container reboots. Each boot runs in a fresh time
# namespace whose boot clock starts near 0, so /proc/uptime drops the way pyinfra's server.reboot
# expects of a real reboot. The running nspawn's "pid starttime" goes to NSPAWN_PIDFILE.
#
#   launcher.sh /tmp/gpuprov-lab/hosts/lab-a100-01/nspawn.pid systemd-nspawn -D ... --boot
set -u
pidfile=$1
shift
while :; do
  unshare --time --boottime "-$(( $(cut -d. -f1 /proc/uptime) - 1 ))" "$@" &
  echo "$! $(cut -d' ' -f22 "/proc/$!/stat")" > "$pidfile"
  wait $!
  rc=$?
  [ "$rc" = 133 ] || exit "$rc"
done
