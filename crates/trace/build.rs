//! Builds the CO-RE BPF program and its Rust skeleton.
//!
//! vmlinux.h (the kernel's types) comes, in this order, from:
//! 1. `RTSLICE_VMLINUX_H=/path/to/vmlinux.h` when set (cross builds, pinned headers);
//! 2. the building machine's kernel BTF: `bpftool btf dump file /sys/kernel/btf/vmlinux format c`;
//! 3. `src/bpf/vmlinux_min.h`, a small hand-written subset of the types the program reads, marked
//!    `preserve_access_index`, so CO-RE relocates every access against the running kernel's BTF at
//!    load time anyway. A cargo warning says when this fallback is used.
//!
//! Since the program is CO-RE, the header only has to declare the fields; their offsets are resolved
//! on the machine that loads the program, so a binary built from any of the three runs on any kernel
//! with BTF.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/rtlat.bpf.c";
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let include = out.join("vmlinux");
    fs::create_dir_all(&include).expect("create OUT_DIR/vmlinux");
    let header = include.join("vmlinux.h");

    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-env-changed=RTSLICE_VMLINUX_H");

    let origin = match vmlinux_header(&header) {
        Ok(origin) => origin,
        Err(reason) => {
            println!(
                "cargo:warning=rtslice-trace: using the minimal CO-RE header src/bpf/vmlinux_min.h ({reason}); \
                 to use the full kernel types install bpftool and boot a kernel with CONFIG_DEBUG_INFO_BTF=y, \
                 or set RTSLICE_VMLINUX_H=/path/to/vmlinux.h"
            );
            fs::copy("src/bpf/vmlinux_min.h", &header).expect("copy src/bpf/vmlinux_min.h");
            "src/bpf/vmlinux_min.h (minimal CO-RE subset)".to_string()
        }
    };
    println!("cargo:rustc-env=RTSLICE_VMLINUX_ORIGIN={origin}");

    let skel = out.join("rtlat.skel.rs");
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    if let Err(e) = SkeletonBuilder::new()
        .source(SRC)
        .clang(&clang)
        .clang_args([
            "-I".into(),
            include.clone().into_os_string(),
            "-I".into(),
            "src/bpf".into(),
            "-Wall".into(),
            "-Wno-unused-function".into(),
        ])
        .build_and_generate(&skel)
    {
        // A build script can only fail by panicking; say what is missing and how to get it.
        panic!(
            "rtslice-trace: compiling {SRC} with {} failed: {e:#}\n\
             needs clang (with the BPF target) and llvm: `sudo make deps` or `apt-get install clang llvm`",
            Path::new(&clang).display()
        );
    }
}

fn vmlinux_header(dst: &Path) -> Result<String, String> {
    if let Some(path) = env::var_os("RTSLICE_VMLINUX_H") {
        let path = PathBuf::from(path);
        println!("cargo:rerun-if-changed={}", path.display());
        fs::copy(&path, dst).map_err(|e| format!("RTSLICE_VMLINUX_H={}: {e}", path.display()))?;
        return Ok(format!("RTSLICE_VMLINUX_H={}", path.display()));
    }
    if !Path::new(KERNEL_BTF).exists() {
        return Err(format!("{KERNEL_BTF} is missing: this kernel was built without BTF"));
    }
    // Debian puts bpftool in /usr/sbin, which a non-root PATH often lacks.
    let mut tried = Vec::new();
    for bpftool in ["bpftool", "/usr/sbin/bpftool", "/sbin/bpftool", "/usr/local/sbin/bpftool"] {
        match Command::new(bpftool).args(["btf", "dump", "file", KERNEL_BTF, "format", "c"]).output() {
            Ok(o) if o.status.success() && o.stdout.len() > 1024 => {
                fs::write(dst, &o.stdout).map_err(|e| format!("write {}: {e}", dst.display()))?;
                return Ok(format!("{bpftool} btf dump file {KERNEL_BTF}"));
            }
            Ok(o) => tried.push(format!("{bpftool}: {}", String::from_utf8_lossy(&o.stderr).trim())),
            Err(e) => tried.push(format!("{bpftool}: {e}")),
        }
    }
    Err(format!("bpftool could not dump {KERNEL_BTF} ({})", tried.join("; ")))
}
