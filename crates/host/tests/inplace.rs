//! In-place release on the real kernel (root, KernelLock, v1 RT groups): an RT budget change the
//! kernel refuses when the release runs (a child still holds budget under the group it lowers) is
//! kept, said, and given back by `retry_release` as soon as the kernel takes it — the node service
//! retries on every tick, so a released container's budget is not lost.

use rtslice_host::inplace::{InPlace, Unreturned};
use rtslice_testkit::{root_or_skip, skip, KernelLock, OnDrop, TempCgroup};

fn read(p: &std::path::Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).trim().to_string()
}

#[test]
fn a_budget_the_kernel_refuses_at_release_is_given_back_later() {
    root_or_skip!();
    let _lock = KernelLock::acquire();
    let Some(cpu) = rtslice_testkit::cgroup_mount(&["cpu"]).filter(|m| m.join("cpu.rt_runtime_us").exists()) else {
        skip::skip(skip::RT_GROUPS, "no v1 cpu hierarchy with cpu.rt_runtime_us (RT group scheduling)");
        return;
    };
    let parent = TempCgroup::new(&[cpu], "unreturned");
    let budget = parent.dir().join("cpu.rt_runtime_us");
    std::fs::write(&budget, "20000").expect("a 2% budget for the scratch group");
    let child = parent.dir().join("child");
    std::fs::create_dir(&child).unwrap();
    let _child_gone = OnDrop::new({
        let child = child.clone();
        move || {
            let _ = std::fs::write(child.join("cpu.rt_runtime_us"), "0");
            let _ = std::fs::remove_dir(&child);
        }
    });
    std::fs::write(child.join("cpu.rt_runtime_us"), "10000").unwrap();

    // As if a container's start had raised the group by 20000 µs: the child's 10000 makes 0 refused.
    let mut a = InPlace { budget_raised: vec![(budget.clone(), 20000)], ..InPlace::default() };
    let problems = a.release();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("Invalid argument") && problems[0].contains("tried again later"), "{problems:?}");
    assert_eq!(a.unreturned, vec![Unreturned::Lower(budget.clone(), 20000)]);
    assert_eq!(read(&budget), "20000");
    assert!(!a.retry_release(), "still refused while the child holds budget");
    assert_eq!(read(&budget), "20000");

    std::fs::write(child.join("cpu.rt_runtime_us"), "0").unwrap();
    assert!(a.retry_release(), "given back once the kernel takes it");
    assert_eq!(read(&budget), "0");
    assert!(a.unreturned.is_empty());
    // Nothing left: a later retry changes nothing.
    assert!(a.retry_release());
    assert_eq!(read(&budget), "0");
}
