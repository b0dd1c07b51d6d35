/* Shared between rtlat.bpf.c and the Rust reader: src/bpf.rs reads the structs through the types
 * libbpf-cargo generates into the skeleton from this program's BTF; src/hist.rs copies the histogram
 * constants, and the unit test `hist_constants_match_the_bpf_layout` (src/bpf.rs) fails when the
 * two drift apart. */
#ifndef RTLAT_H
#define RTLAT_H

/* log2 histogram of the studies: slot k holds latencies of [2^k, 2^(k+1)) µs, slot 0 holds 0–1 µs
 * (integer µs, as BCC's runqlat). The last slot also takes everything above it. */
#define LOG2_SLOTS 27
/* Log-linear histogram in ns: values below 16 ns exact; above, 16 sub-buckets per power of two, so a
 * bucket's width is at most 1/16 of its lower bound (relative error <= 6.25%). Highest exact octave
 * is 2^FINE_MAX_MSB .. 2^(FINE_MAX_MSB+1) ns (137..275 s); the extra last slot counts overflows. */
#define FINE_SUB_BITS 4
#define FINE_MAX_MSB 37
#define FINE_SLOTS ((FINE_MAX_MSB - FINE_SUB_BITS + 1) * (1 << FINE_SUB_BITS) + (1 << FINE_SUB_BITS) + 1)

#define KIND_WAKEUP 0  /* sleeping task woken (sched_wakeup/_new) until it runs */
#define KIND_PREEMPT 1 /* task switched out while runnable until it runs again */

#define FILTER_ALL 0
#define FILTER_PIDS 1
#define FILTER_CGROUP 2
/* A set of cgroups in one hierarchy (map filter_cgroups), changed while the program runs. */
#define FILTER_CGROUP_SET 3

/* cg_ctrl values: which cgroup hierarchy the cgroup filter looks at */
#define CG_V2 0
#define CG_V1_CPUSET 1
#define CG_V1_CPU 2
#define CG_V1_CPUACCT 3
#define CG_V1_MEMORY 4
#define CG_V1_PIDS 5

/* Demand buckets (`rtslice profile`): the traced threads' CPU time as the scheduler charges it (each
 * slice's task-clock time spread evenly over its wall time) summed per bucket of demand_bucket_ns of
 * CLOCK_MONOTONIC, in a ring; `index` is the bucket's number since boot
 * (time / demand_bucket_ns), so a slot whose index is old holds nothing of the current round. */
struct demand_bucket {
	__u64 index;
	__u64 ns;
};
/* The most buckets one off-CPU switch spreads its slice over when user space sets no span. */
#define DEMAND_MAX_SPAN 64
/* A slice's charged share of its wall time, in fixed point (1 << DEMAND_SCALE_SHIFT is all of it). */
#define DEMAND_SCALE_SHIFT 20
#define DEMAND_SCALE_ONE (1ULL << DEMAND_SCALE_SHIFT)

struct hist {
	__u64 events;
	__u64 sum_ns;
	__u64 max_ns;
	__u64 log2_us[LOG2_SLOTS];
	__u64 fine[FINE_SLOTS];
};

struct tstats {
	struct hist h[2];
	__u64 nvcsw;       /* switched out blocked (voluntary) */
	__u64 nivcsw;      /* switched out runnable (involuntary, preempted) */
	__u64 migrations;  /* ran on a different CPU than the previous time */
	__u64 oncpu_ns;    /* CPU time charged (task clock: what the host took is left out) */
	__u64 slices;      /* switch-ins: compares with schedstat's pcount */
	__u64 oncpu_since; /* CLOCK_MONOTONIC at the switch-in; 0 when off CPU */
	__u64 charged_since; /* se.sum_exec_runtime at the switch-in (valid while oncpu_since != 0) */
	__u64 wait_since;  /* 0 when not waiting for a CPU: woken or preempted at this time */
	__u32 wait_kind;   /* KIND_WAKEUP or KIND_PREEMPT, valid while wait_since != 0 */
	__u32 last_cpu;
	__u32 tgid;
	__u32 pad;
	/* FILTER_CGROUP_SET: the id of the filter cgroup the thread was last seen in (its own or the
	 * nearest ancestor in the set), so user space can attribute threads that exited. 0 otherwise. */
	__u64 cgroup;
	/* SCHED_DEADLINE: slices in which its runtime ran out — throttled (dl_throttled at the switch
	 * away) or, when its deadline had already passed, replenished at once with a later deadline
	 * (dl.deadline moved while it ran). A reservation that misses deadlines without these is not
	 * short of budget. */
	__u64 dl_throttles;
	__u64 dl_deadline; /* dl.deadline at its last switch-in (deadline threads) */
	char comm[16];
};

#endif
