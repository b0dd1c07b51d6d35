/* Minimal CO-RE kernel types for rtlat.bpf.c: the fallback when the build machine has no kernel BTF or
 * no bpftool (see build.rs). Only the fields the program reads are declared; every struct is marked
 * preserve_access_index, so libbpf relocates each access against the running kernel's BTF at load
 * time and the declared layout here does not need to match any kernel. */
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u8 u8;
typedef __s16 s16;
typedef __u16 u16;
typedef __s32 s32;
typedef __u32 u32;
typedef __s64 s64;
typedef __u64 u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

/* Values here are placeholders: bpf_core_enum_value() reads the kernel's. CGROUP_SUBSYS_COUNT is only
 * an upper bound for the index check, so it is generous. */
enum cgroup_subsys_id {
	cpuset_cgrp_id = 0,
	cpu_cgrp_id = 1,
	cpuacct_cgrp_id = 2,
	memory_cgrp_id = 4,
	pids_cgrp_id = 11,
	CGROUP_SUBSYS_COUNT = 16,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct kernfs_node {
	u64 id;
};

struct cgroup;

struct cgroup_subsys_state {
	struct cgroup *cgroup;
	struct cgroup_subsys_state *parent;
};

struct cgroup {
	struct cgroup_subsys_state self;
	struct kernfs_node *kn;
};

struct css_set {
	struct cgroup_subsys_state *subsys[CGROUP_SUBSYS_COUNT];
	struct cgroup *dfl_cgrp;
};

struct sched_dl_entity {
	u64 deadline;
	unsigned int dl_throttled : 1;
};

struct sched_entity {
	u64 sum_exec_runtime;
};

struct task_struct {
	struct sched_entity se;
	unsigned int __state;
	int exit_state;
	int pid;
	int tgid;
	char comm[16];
	struct css_set *cgroups;
	unsigned int policy;
	struct sched_dl_entity dl;
};

struct pt_regs {
	long di, si, dx, cx, r8, r9, ax, sp, ip, bp;
};

#pragma clang attribute pop

#endif
