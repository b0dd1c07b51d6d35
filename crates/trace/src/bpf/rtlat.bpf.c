// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* rtslice per-thread scheduling latency. Modelled on libbpf-tools' runqlat.bpf.c, extended to keep
 * wake-up latency (a sleeping task woken until it runs) apart from preemption-return latency (a task
 * switched out while runnable until it runs again), per thread, with a log2 µs histogram (the studies'
 * format) and a log-linear ns histogram (percentiles with bounded error), plus context switches,
 * migrations and on-CPU time.
 *
 * The filter always looks at the task the event is about (the woken task, prev or next of a switch),
 * never at `current`: a wake-up runs in the waker's context.
 *
 * Every program exists twice: tp_btf (typed, cheapest) and raw_tp (for kernels whose tp_btf attach
 * fails); user space loads one set. Both read kernel memory with CO-RE reads so the code is shared. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "rtlat.h"

#define MAX_THREADS 8192
#define MAX_CG_DEPTH 16
#define TASK_RUNNING 0

const volatile __u32 filter_mode = FILTER_PIDS;
const volatile __u32 cg_ctrl = CG_V2;
const volatile __u64 cg_id = 0;
/* Skip lookups in an empty filter map: every switch on the machine runs the filter twice. */
const volatile bool have_tgids = true;
const volatile bool have_tids = true;

/* Threads whose statistics could not be stored because the map was full: their events are lost. */
__u64 lost_stats = 0;
/* Events of a new thread whose entry could not be made at that moment: the map's allocator had no
 * free element on that CPU yet (ENOMEM; it refills asynchronously) or the bucket was locked by a
 * program interrupted on the same CPU (EBUSY). The thread's next event makes its entry. */
__u64 unstored_events = 0;

/* Demand buckets: off when demand_bucket_ns is 0 (the ring then has one unused slot). A constant
 * of the loaded program (.rodata): with it 0, as for `rtslice trace` and the node's continuous
 * tracer, the verifier removes the demand code (the span's bpf_loop and its arithmetic) from the
 * program, so only `rtslice profile` runs it. */
const volatile __u64 demand_bucket_ns = 0;
const volatile __u32 demand_slots = 1;
/* The buckets a slice is spread over, its last ones: user space sets the buckets it has not yet
 * read when a slice ends (those of its settling delay), so only time already read is left out. */
const volatile __u32 demand_span = DEMAND_MAX_SPAN;
/* On-CPU time of slices longer than demand_span buckets, before their last demand_span buckets. */
__u64 demand_overflow_ns = 0;
/* Set by user space right after attaching: a thread switched out without a switch-in seen has been
 * on its CPU since before then, and its slice is counted from here (the profile's windows start
 * later), not dropped: for a thread that keeps its CPU for hundreds of ms, up to that much. */
__u64 demand_since = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by user space before loading */
	__type(key, __u32);
	__type(value, struct demand_bucket);
} demand SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} filter_tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} filter_tids SEC(".maps");

/* FILTER_PIDS with exactly one process and no single threads (`rtslice trace --pid`, the overhead
 * benchmark): its tgid, compared directly instead of looked up — two hash lookups are most of what a
 * switch costs here (runqlat -p compares a constant too). 0: use the maps. User space keeps it as it
 * adds and removes processes; an array map, so it can change while the program runs and its lookup
 * is inlined. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} single_tgid SEC(".maps");

/* FILTER_CGROUP_SET: cgroup ids (kernfs inode numbers) of the cg_ctrl hierarchy whose threads, and
 * their descendants', are traced. User space adds and removes entries while the program runs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u8);
} filter_cgroups SEC(".maps");

/* FILTER_CGROUP_SET: entries in filter_cgroups (kept by user space), so an empty set costs one load
 * per event instead of a walk up the hierarchy. */
__u32 cgroup_set_size = 0;

/* Per thread: counters, histograms and the start of the current wait (no separate start map: one
 * lookup per event). ~9.5 KiB per thread: allocated on first use, not preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct tstats);
} stats SEC(".maps");

/* Runs of this object's programs, per CPU: the overhead's run count. The kernel counts runs (and
 * their time) only while its BPF run-time statistics are on, and those cost every run of every BPF
 * program on the machine two sched_clock() reads; user space turns them on for short sample windows
 * only (src/bpf.rs) and counts runs here, with one inlined per-CPU increment. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} runs SEC(".maps");

static __always_inline void count_run(void)
{
	__u32 zkey = 0;
	__u64 *n = bpf_map_lookup_elem(&runs, &zkey);

	/* Per CPU, and no two of these programs run nested on one CPU (a switch runs with interrupts
	 * off; a wake-up's interrupt could only wake up, and the kernel skips a program that would run
	 * nested in itself, counting a recursion miss): a plain increment is exact. */
	if (n)
		*n += 1;
}

/* An all-zero template for new entries (too big for the 512-byte BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tstats);
} zero SEC(".maps");

/* A field of a kernel object: a plain load in the tp_btf programs (their arguments are typed BTF
 * pointers the verifier lets them read directly, relocated by CO-RE like every access to a
 * vmlinux.h type: no helper call — the probe-read helpers were most of an event's cost), a CO-RE
 * probe read in the raw_tp ones. `btf` is a constant in each program. */
#define KREAD(btf, p, f) ((btf) ? (p)->f : BPF_CORE_READ(p, f))

/* task_struct::state became __state in 5.14 (same fix as libbpf-tools' core_fixes.bpf.h). */
struct task_struct___o {
	volatile long int state;
} __attribute__((preserve_access_index));

struct task_struct___x {
	unsigned int __state;
} __attribute__((preserve_access_index));

static __always_inline __s64 task_state(void *task, bool btf)
{
	struct task_struct___x *t = task;

	if (bpf_core_field_exists(t->__state))
		return KREAD(btf, t, __state);
	return KREAD(btf, (struct task_struct___o *)task, state);
}

/* include/uapi/linux/sched.h (a #define, so not in vmlinux.h). */
#define RTLAT_SCHED_DEADLINE 6

static __always_inline bool is_deadline(struct task_struct *t, bool btf)
{
	return KREAD(btf, t, policy) == RTLAT_SCHED_DEADLINE;
}

/* A deadline task's runtime ran out in the slice that ends now. update_curr_dl either throttles it
 * (dl_throttled, until the replenishment timer at its deadline) or, when that deadline has already
 * passed, replenishes it at once with a later deadline; both are the budget ending the work, so
 * both count: the bit, or a deadline that moved since the switch-in (nothing else moves it while
 * the task runs). dl_throttled is a bitfield: its byte offset, size and shifts are CO-RE
 * relocations, so each kernel's sched_dl_entity layout is followed; the probed read works in both
 * program kinds. */
static __always_inline bool dl_ran_out(struct task_struct *t, struct tstats *st, bool btf)
{
	if (!is_deadline(t, btf))
		return false;
	/* The access path starts at the task: the macro adds the field's relocated offset to the
	 * pointer it is given, and clang roots that offset at the outermost object of the expression
	 * (`(&t->dl)->dl_throttled` is t's offset 540 here, added to &t->dl: another word, read as
	 * "throttled" at random). */
	if (BPF_CORE_READ_BITFIELD_PROBED(t, dl.dl_throttled))
		return true;
	return st->dl_deadline && BPF_CORE_READ(t, dl.deadline) != st->dl_deadline;
}

static __always_inline __u64 log2_32(__u32 v)
{
	__u32 shift, r;

	r = (v > 0xFFFF) << 4; v >>= r;
	shift = (v > 0xFF) << 3; v >>= shift; r |= shift;
	shift = (v > 0xF) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

static __always_inline __u64 log2_64(__u64 v)
{
	__u32 hi = v >> 32;

	return hi ? log2_32(hi) + 32 : log2_32(v);
}

static __always_inline int subsys_index(void)
{
	switch (cg_ctrl) {
	case CG_V1_CPUSET:
		return bpf_core_enum_value_exists(enum cgroup_subsys_id, cpuset_cgrp_id) ?
			       bpf_core_enum_value(enum cgroup_subsys_id, cpuset_cgrp_id) : -1;
	case CG_V1_CPU:
		return bpf_core_enum_value_exists(enum cgroup_subsys_id, cpu_cgrp_id) ?
			       bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id) : -1;
	case CG_V1_CPUACCT:
		return bpf_core_enum_value_exists(enum cgroup_subsys_id, cpuacct_cgrp_id) ?
			       bpf_core_enum_value(enum cgroup_subsys_id, cpuacct_cgrp_id) : -1;
	case CG_V1_MEMORY:
		return bpf_core_enum_value_exists(enum cgroup_subsys_id, memory_cgrp_id) ?
			       bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id) : -1;
	case CG_V1_PIDS:
		return bpf_core_enum_value_exists(enum cgroup_subsys_id, pids_cgrp_id) ?
			       bpf_core_enum_value(enum cgroup_subsys_id, pids_cgrp_id) : -1;
	}
	return -1;
}

/* The id of the task's cgroup in the configured hierarchy, or of its nearest ancestor, that is the
 * target cgroup (FILTER_CGROUP) or in the set (FILTER_CGROUP_SET); 0 when none is. */
static __always_inline __u64 in_cgroup(struct task_struct *t, bool btf)
{
	struct cgroup *cg;
	__u64 id;
	/* Plain loads only from the typed pointer chain of a tp_btf program (v2's dfl_cgrp). A v1
	 * cgroup comes out of probe reads (the subsystem's slot has a variable index, which the verifier
	 * does not allow on a typed pointer): it is a plain number to the verifier, and dereferencing it
	 * made the whole tp_btf object fail to load on v1 hosts ("R3 invalid mem access 'scalar'"), so
	 * continuous tracing there always fell back to raw_tp. */
	bool direct = btf && cg_ctrl == CG_V2;

	if (cg_ctrl == CG_V2) {
		cg = btf ? t->cgroups->dfl_cgrp : BPF_CORE_READ(t, cgroups, dfl_cgrp);
	} else {
		struct cgroup_subsys_state *css = NULL;
		struct css_set *cs = BPF_CORE_READ(t, cgroups);
		int idx = subsys_index();

		if (idx < 0 || idx >= CGROUP_SUBSYS_COUNT || !cs)
			return 0;
		bpf_core_read(&css, sizeof(css), &cs->subsys[idx]);
		if (!css)
			return 0;
		cg = BPF_CORE_READ(css, cgroup);
	}
	for (int i = 0; i < MAX_CG_DEPTH; i++) {
		if (!cg)
			return 0;
		id = direct ? cg->kn->id : BPF_CORE_READ(cg, kn, id);
		if (filter_mode == FILTER_CGROUP_SET) {
			if (bpf_map_lookup_elem(&filter_cgroups, &id))
				return id;
		} else if (id == cg_id) {
			return id;
		}
		cg = direct ? (cg->self.parent ? cg->self.parent->cgroup : NULL) : BPF_CORE_READ(cg, self.parent, cgroup);
	}
	return 0;
}

/* Nonzero when the task is traced: for the cgroup filters the matching cgroup's id, else 1. */
static __always_inline __u64 traced(struct task_struct *t, bool btf)
{
	if (filter_mode == FILTER_ALL)
		return 1;
	if (filter_mode == FILTER_PIDS) {
		__u32 tgid = KREAD(btf, t, tgid);
		__u32 zkey = 0, *one, tid;

		if (have_tgids && !have_tids) {
			one = bpf_map_lookup_elem(&single_tgid, &zkey);
			if (one && *one)
				return tgid == *one;
		}
		tid = KREAD(btf, t, pid);
		return (have_tgids && bpf_map_lookup_elem(&filter_tgids, &tgid)) ||
		       (have_tids && bpf_map_lookup_elem(&filter_tids, &tid));
	}
	if (filter_mode == FILTER_CGROUP_SET && !cgroup_set_size)
		return 0;
	/* A CPU's idle task (pid 0, one side of most switches on a machine that is not saturated) is
	 * no thread waiting for a CPU, even with the root cgroup as the target (runqlat skips it too):
	 * no walk up the hierarchy for it. */
	if (!KREAD(btf, t, pid))
		return 0;
	return in_cgroup(t, btf);
}

static __always_inline struct tstats *stats_of(struct task_struct *t, __u32 tid, __u64 cgroup, bool btf)
{
	struct tstats *st = bpf_map_lookup_elem(&stats, &tid);
	__u32 zkey = 0;
	long err;

	if (st) {
		/* A thread moved to another traced cgroup is attributed to the new one from now on. */
		if (filter_mode == FILTER_CGROUP_SET && st->cgroup != cgroup)
			st->cgroup = cgroup;
		return st;
	}
	/* A thread past exit_notify (exit_state set) may already be reaped: user space then saw its
	 * /proc entry gone, reported it exited and deleted its entry, and its last switches (the final
	 * one into TASK_DEAD, or a preemption on the way there) must not make a new one that would
	 * report it again and never be removed. Its entry, if it still has one, is updated. */
	if (KREAD(btf, t, exit_state))
		return NULL;
	st = bpf_map_lookup_elem(&zero, &zkey);
	if (!st)
		return NULL;
	err = bpf_map_update_elem(&stats, &tid, st, BPF_NOEXIST);
	if (err == -7 /* E2BIG: the map is full */) {
		__sync_fetch_and_add(&lost_stats, 1);
		return NULL;
	}
	if (err && err != -17 /* EEXIST: raced with another CPU */) {
		__sync_fetch_and_add(&unstored_events, 1);
		return NULL;
	}
	st = bpf_map_lookup_elem(&stats, &tid);
	if (st) {
		st->last_cpu = (__u32)-1;
		st->tgid = BPF_CORE_READ(t, tgid);
		st->cgroup = filter_mode == FILTER_CGROUP_SET ? cgroup : 0;
		BPF_CORE_READ_STR_INTO(&st->comm, t, comm);
	}
	return st;
}

static __always_inline void record(struct tstats *st, __u32 kind, __u64 delta_ns)
{
	struct hist *h = &st->h[kind & 1];
	/* ⌊ns / 1000⌋ by a multiply and a shift, exact for every 32-bit value (0x10624DD3 = ⌈2^38 /
	 * 1000⌉; checked over 2M random values and the edges): a 64-bit division is a noticeable part
	 * of a switch's cost. Waits of 4.3 s and more divide. */
	__u64 us = delta_ns < (1ULL << 32) ? (delta_ns * 0x10624DD3ULL) >> 38 : delta_ns / 1000;
	__u64 slot = log2_64(us);
	__u64 msb, idx;

	if (slot >= LOG2_SLOTS)
		slot = LOG2_SLOTS - 1;
	if (delta_ns < (1 << FINE_SUB_BITS)) {
		idx = delta_ns;
	} else {
		msb = log2_64(delta_ns);
		if (msb > FINE_MAX_MSB)
			idx = FINE_SLOTS - 1;
		else
			idx = ((msb - FINE_SUB_BITS + 1) << FINE_SUB_BITS) +
			      ((delta_ns >> (msb - FINE_SUB_BITS)) & ((1 << FINE_SUB_BITS) - 1));
	}
	if (idx >= FINE_SLOTS)
		idx = FINE_SLOTS - 1;
	h->events++;
	h->sum_ns += delta_ns;
	if (delta_ns > h->max_ns)
		h->max_ns = delta_ns;
	h->log2_us[slot]++;
	h->fine[idx]++;
}

static __always_inline int on_wakeup(struct task_struct *p, bool btf)
{
	struct tstats *st;
	__u64 key;

	count_run();
	key = traced(p, btf);
	if (!key)
		return 0;
	st = stats_of(p, KREAD(btf, p, pid), key, btf);
	/* Only a task not already waiting starts a wait: a wake-up of a task still queued after a
	 * preemption (ttwu_runnable) does not restart it. A task woken while running (it had not yet
	 * blocked) gets a start that its next switch-out replaces or clears. */
	if (st && !st->wait_since) {
		st->wait_kind = KIND_WAKEUP;
		st->wait_since = bpf_ktime_get_ns();
	}
	return 0;
}

struct demand_span {
	__u64 from;
	__u64 to;
	/* The share of the slice's wall time the thread was charged, in 2^-DEMAND_SCALE_SHIFT units. */
	__u64 scale;
};

/* `ns` of a slice's wall time times its charged share, rounded up (a profile sizes budgets, so it
 * may over-count by a ns per bucket but never under-count); split so that slices of hours do not
 * overflow the product. */
static __always_inline __u64 scaled(__u64 ns, __u64 scale)
{
	if (scale >= DEMAND_SCALE_ONE)
		return ns;
	return (ns >> DEMAND_SCALE_SHIFT) * scale +
	       (((ns & (DEMAND_SCALE_ONE - 1)) * scale + DEMAND_SCALE_ONE - 1) >> DEMAND_SCALE_SHIFT);
}

/* One bucket of a slice: adds the part of [from, to) in from's bucket and moves from past it.
 * A slot still holding an older round is taken over; two CPUs taking over the same slot at once
 * may lose one slice's first add (a slot is only reused after demand_slots buckets, long after user
 * space read it). Returns 1 (stop) when the slice is done. */
static long demand_step(__u32 i, struct demand_span *s)
{
	__u64 w = demand_bucket_ns;
	struct demand_bucket *b;
	__u64 idx, end, upto;
	__u32 key;

	if (!w || !demand_slots || s->from >= s->to)
		return 1;
	idx = s->from / w;
	end = (idx + 1) * w;
	upto = end < s->to ? end : s->to;
	key = idx % demand_slots;
	b = bpf_map_lookup_elem(&demand, &key);
	if (!b)
		return 1;
	if (b->index != idx) {
		b->index = idx;
		b->ns = 0;
	}
	__sync_fetch_and_add(&b->ns, scaled(upto - s->from, s->scale));
	s->from = upto;
	return s->from >= s->to;
}

/* Adds the on-CPU slice [from, to), of which the thread was charged `ran` ns, to the buckets it
 * spans, each bucket its part of the wall time times ran / (to - from) (bpf_loop, 5.17+: the step is
 * verified once, where an unrolled loop over many buckets exceeds the verifier's budget). What the
 * host took from the slice is not known bucket by bucket, so it is spread evenly. A slice over more
 * than demand_span buckets (a thread that kept its CPU for longer than user space waits before it
 * reads a bucket: a busy thread on a vCPU its host took away, or one catching up a backlog) is
 * spread over its last demand_span buckets; its head, whose buckets user space has already read,
 * is counted in demand_overflow_ns. */
static __always_inline void add_demand(__u64 from, __u64 to, __u64 ran)
{
	struct demand_span s = { .from = from, .to = to, .scale = DEMAND_SCALE_ONE };
	__u64 w = demand_bucket_ns;
	__u64 first;

	if (!w || !demand_span || from >= to)
		return;
	if (ran < to - from)
		s.scale = (ran << DEMAND_SCALE_SHIFT) / (to - from);
	/* The first bucket spread: the one demand_span - 1 before the slice's last. */
	first = (to - 1) / w;
	first = first >= demand_span - 1 ? (first - (demand_span - 1)) * w : 0;
	if (s.from < first) {
		__sync_fetch_and_add(&demand_overflow_ns, scaled(first - s.from, s.scale));
		s.from = first;
	}
	bpf_loop(demand_span, demand_step, &s, 0);
	if (s.from < s.to)
		__sync_fetch_and_add(&demand_overflow_ns, scaled(s.to - s.from, s.scale));
}

/* The CPU time the scheduler has charged the thread (se.sum_exec_runtime): its task clock, which
 * leaves out what the hypervisor took from the vCPU (paravirt steal accounting), as a SCHED_DEADLINE
 * budget, schedstat and cpuacct do. At sched_switch the outgoing thread's is up to date: the
 * dequeue or put_prev_task before it ran update_curr. */
static __always_inline __u64 charged_ns(struct task_struct *p, bool btf)
{
	return KREAD(btf, p, se.sum_exec_runtime);
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev, struct task_struct *next, bool btf)
{
	/* Every switch on the machine runs this: the filter first, and nothing else — not even the
	 * clock — for a switch between two untraced tasks. */
	__u64 key, next_key;
	struct tstats *st;
	__u64 now;

	count_run();
	key = traced(prev, btf);
	next_key = traced(next, btf);
	if (!key && !next_key)
		return 0;
	now = bpf_ktime_get_ns();
	if (key) {
		st = stats_of(prev, KREAD(btf, prev, pid), key, btf);
		if (st) {
			if (st->oncpu_since) {
				__u64 ran = charged_ns(prev, btf) - st->charged_since;

				/* The two clocks differ by a few ns per slice natively, by a few % in a TCG
				 * guest: a thread is never charged more than its wall time on the CPU. */
				if (ran > now - st->oncpu_since)
					ran = now - st->oncpu_since;
				st->oncpu_ns += ran;
				add_demand(st->oncpu_since, now, ran);
				st->oncpu_since = 0;
			} else if (demand_bucket_ns && !st->slices && demand_since && demand_since < now) {
				/* What it was charged since demand_since is unknown: its wall time, which
				 * over-counts by what the host took meanwhile. */
				add_demand(demand_since, now, now - demand_since);
			}
			/* Also on a switch that blocks: the accounting at the dequeue may be what ran it out. */
			if (dl_ran_out(prev, st, btf))
				st->dl_throttles++;
			/* Preempted (or blocked with a wake-up already pending): still on the run queue. */
			if (preempt || task_state(prev, btf) == TASK_RUNNING) {
				st->nivcsw++;
				st->wait_kind = KIND_PREEMPT;
				st->wait_since = now;
			} else {
				st->nvcsw++;
				st->wait_since = 0;
			}
		}
	}

	if (next_key) {
		__u32 cpu = bpf_get_smp_processor_id();

		st = stats_of(next, KREAD(btf, next, pid), next_key, btf);
		if (st) {
			if (st->wait_since && now > st->wait_since)
				record(st, st->wait_kind, now - st->wait_since);
			st->wait_since = 0;
			st->slices++;
			if (st->last_cpu != (__u32)-1 && st->last_cpu != cpu)
				st->migrations++;
			st->last_cpu = cpu;
			st->oncpu_since = now;
			st->charged_since = charged_ns(next, btf);
			st->dl_deadline = is_deadline(next, btf) ? BPF_CORE_READ(next, dl.deadline) : 0;
			/* Threads are often named after they start (pthread_setname_np, exec): refresh the name
			 * in each of the first slices and then now and then (user space reads /proc for live
			 * threads; this is for exited ones, e.g. a short-lived process named at exec). */
			if (st->slices <= 4 || (st->slices & 255) == 1)
				BPF_CORE_READ_STR_INTO(&st->comm, next, comm);
		}
	}
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(wakeup_btf, struct task_struct *p)
{
	return on_wakeup(p, true);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(wakeup_new_btf, struct task_struct *p)
{
	return on_wakeup(p, true);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, true);
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(wakeup_raw, struct task_struct *p)
{
	return on_wakeup(p, false);
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(wakeup_new_raw, struct task_struct *p)
{
	return on_wakeup(p, false);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, false);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
