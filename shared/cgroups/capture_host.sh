#!/bin/sh
# Copies the cgroup files the policy reads, for the calling process, into shared/cgroups/<name>/.
# Usage: sh shared/cgroups/capture_host.sh <name> [cgroup mount, default /sys/fs/cgroup]
# Writes proc_self_cgroup and root/; PROVENANCE and expected.json are left for a person to write.
set -eu

name=${1:?usage: capture_host.sh <name> [mount]}
mount=${2:-/sys/fs/cgroup}
dest="$(dirname "$0")/$name"
files="cgroup.controllers cpu.max memory.max memory.high memory.current memory.stat memory.events
cpu.cfs_quota_us cpu.cfs_period_us memory.limit_in_bytes memory.usage_in_bytes memory.oom_control"

mkdir -p "$dest/root"
cat /proc/self/cgroup >"$dest/proc_self_cgroup"

# Copies the listed files of one directory and of every ancestor up to the hierarchy's mount root.
copy_walk() {
    hierarchy=$1
    path=$2
    while :; do
        source_dir="$mount/$hierarchy$path"
        target_dir="$dest/root/$hierarchy$path"
        mkdir -p "$target_dir"
        for file in $files; do
            if [ -f "$source_dir/$file" ]; then cat "$source_dir/$file" >"$target_dir/$file"; fi
        done
        [ "$path" = "/" ] && break
        path=$(dirname "$path")
    done
}

if [ -f "$mount/cgroup.controllers" ]; then
    unified=""
else
    unified="unified"
fi

while IFS=: read -r _ controllers path; do
    if [ -z "$controllers" ]; then
        [ -f "$mount/${unified:-.}/cgroup.controllers" ] && copy_walk "$unified" "$path"
    else
        case ",$controllers," in
            *,cpu,*|*,memory,*) [ -d "$mount/$controllers" ] && copy_walk "$controllers" "$path" ;;
        esac
    fi
done <"$dest/proc_self_cgroup"
