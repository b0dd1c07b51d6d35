#!/bin/bash
# snapshot.sh DIR: writes the host state a Kubernetes node can change into DIR, one file per kind,
# sorted, so that `diff` of a snapshot taken before the cluster and one after its teardown names
# anything left behind (k8s/e2e/run.sh compares them; the kernel tests do the same with their
# KernelSnapshot). What kubelet, containerd, runc and CNI plugins are known to change:
#   mounts    mount points (/proc/self/mountinfo): overlay rootfs, sandbox shm, kubelet volumes
#   cgroups   every directory of every hierarchy (kubepods/… in each v1 controller), but the
#             siblings of the script's own cgroups
#   netns     named network namespaces (/run/netns, /var/run/netns): CNI's per-pod netns
#   links     network interfaces: a CNI bridge and veths
#   iptables  iptables-save/ip6tables-save rules without counters: kubelet's KUBE-* chains, CNI's
#   sysctls   `sysctl -a` minus counters that move by themselves: kubelet's vm.overcommit_memory,
#             kernel.panic, kernel.panic_on_oops, kernel.keys.*; a bridge's net.* keys
#   paths     whether the directories the components write by default exist (they must not be
#             created, since everything of ours is configured under /var/lib/rtslice-k8s)
set -u
out=$1
mkdir -p "$out"
awk '{print $5}' /proc/self/mountinfo | sort >"$out/mounts"
# Less the siblings of the cgroups this script runs in (e.g. the launcher's per-job cgroups, which
# come and go while the test runs): those are the launcher's, not the cluster's.
own=$(cut -d: -f3 /proc/$$/cgroup | grep -v '^/$' | xargs -r -n1 dirname | grep -v '^/$' | sort -u | sed 's|$|/|')
find /sys/fs/cgroup -mindepth 2 -type d 2>/dev/null | sort | awk -v own="$own" '
  BEGIN { n = split(own, o, "\n") }
  { rel = $0; sub("^/sys/fs/cgroup/[^/]*", "", rel); skip = 0
    for (i = 1; i <= n; i++) if (o[i] != "" && (index(rel "/", o[i]) == 1 || rel "/" == o[i])) skip = 1
    if (!skip) print }' >"$out/cgroups"
ls -1 /run/netns /var/run/netns 2>/dev/null | sort -u >"$out/netns"
ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | sort >"$out/links"
# A table with nothing in it (built-in chains, policy ACCEPT, no rule) is as good as none: iptables
# cannot remove a table once something made it, only empty it.
for t in iptables-save ip6tables-save; do
  command -v $t >/dev/null || continue
  $t 2>/dev/null | grep -v '^#' | sed 's/\[[0-9]*:[0-9]*\]//' | awk -v fam="${t%%-save}" '
    /^\*/ { table = $0; body = ""; keep = 0; next }
    /^COMMIT/ { if (keep) printf "%s %s\n%s", fam, table, body; next }
    { body = body fam " " $0 "\n"
      if ($0 ~ /^-/ || ($0 ~ /^:/ && ($2 != "ACCEPT" || $1 !~ /^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING)$/))) keep = 1 }'
done >"$out/iptables"
# Keys that change on their own (counters, random values, the last pid) are left out.
sysctl -a 2>/dev/null \
  | grep -Ev '^(fs\.(dentry-state|file-nr|inode-nr|inode-state|quota\.)|kernel\.(ns_last_pid|random\.|pty\.nr)|net\.netfilter\.nf_conntrack_count)' \
  | sort >"$out/sysctls"
for p in /var/lib/kubelet /var/log/pods /var/log/containers /etc/kubernetes /run/containerd \
         /var/lib/containerd /opt/containerd /etc/containerd /etc/cni /opt/cni /var/lib/cni \
         /run/nri /var/run/nri /run/netns /var/lib/rtslice-k8s /run/rtslice-k8s /run/runc; do
  [ -e "$p" ] && echo "$p"
done >"$out/paths"
exit 0
