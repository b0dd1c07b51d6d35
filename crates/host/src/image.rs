//! Running containers from images built elsewhere, without a registry or a container engine: an OCI
//! image layout directory (`oci-layout`, `index.json`, `blobs/`; what `skopeo copy … oci:DIR`,
//! `buildah push … oci:DIR` and `docker buildx --output type=oci` write) or a `docker save` archive
//! (a tar holding `manifest.json` and the layers, or, from Docker 25 on, an OCI layout itself) is
//! unpacked into a runtime bundle: the layers applied in order with their whiteouts honoured, and a
//! `config.json` made from the image's configuration (entrypoint and command, environment, working
//! directory, user) the way `umoci unpack` does. `launch` then merges rtslice's resources into that
//! configuration as into any user's bundle.

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Component, Path, PathBuf};

use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest};

use crate::error::{HostError, Result};

/// What a workload's `launch: {oci: {bundle: PATH}}` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OciSource {
    /// A runtime bundle: `config.json` (optional) and `rootfs/`.
    Bundle(PathBuf),
    /// An OCI image layout directory.
    Layout(PathBuf),
    /// A `docker save` tar archive.
    DockerArchive(PathBuf),
}

impl OciSource {
    pub fn detect(path: &Path) -> Result<OciSource> {
        if path.is_file() {
            return Ok(OciSource::DockerArchive(path.to_path_buf()));
        }
        if path.join("oci-layout").is_file() && path.join("index.json").is_file() {
            return Ok(OciSource::Layout(path.to_path_buf()));
        }
        if path.join("rootfs").is_dir() {
            return Ok(OciSource::Bundle(path.to_path_buf()));
        }
        Err(HostError::Invalid(format!(
            "{} is neither an OCI bundle (a directory with rootfs/), an OCI image layout (oci-layout and index.json) nor a \
             `docker save` archive; build a bundle with `runc spec`, or save an image with `docker save -o FILE IMAGE` or \
             `skopeo copy docker-daemon:IMAGE oci:DIR`",
            path.display()
        )))
    }
}

fn image_err(what: impl std::fmt::Display) -> HostError {
    HostError::Invalid(format!("OCI image: {what}"))
}

/// Returns a bundle directory for `source`: the bundle itself, or `dest` after unpacking the image
/// into it (any previous content of `dest` is replaced).
pub fn bundle_for(source: &OciSource, dest: &Path) -> Result<PathBuf> {
    match source {
        OciSource::Bundle(b) => Ok(b.clone()),
        OciSource::Layout(dir) => {
            reset_dir(dest)?;
            unpack_layout(dir, dest)?;
            Ok(dest.to_path_buf())
        }
        OciSource::DockerArchive(tar) => {
            reset_dir(dest)?;
            let extracted = dest.join(".image");
            std::fs::create_dir_all(&extracted).map_err(|source| HostError::Create { path: extracted.clone(), source })?;
            let f = File::open(tar).map_err(|source| HostError::Read { path: tar.clone(), source })?;
            tar::Archive::new(BufReader::new(f))
                .unpack(&extracted)
                .map_err(|e| image_err(format!("cannot extract {}: {e}", tar.display())))?;
            // Docker 25+ writes an OCI layout inside the archive; older versions only manifest.json.
            if extracted.join("index.json").is_file() && extracted.join("oci-layout").is_file() {
                unpack_layout(&extracted, dest)?;
            } else {
                unpack_docker(&extracted, dest)?;
            }
            let _ = std::fs::remove_dir_all(&extracted);
            Ok(dest.to_path_buf())
        }
    }
}

fn reset_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|source| HostError::Write { path: dir.to_path_buf(), value: "<remove>".into(), source })?;
    }
    std::fs::create_dir_all(dir.join("rootfs")).map_err(|source| HostError::Create { path: dir.join("rootfs"), source })
}

fn blob_path(layout: &Path, digest: &str) -> Result<PathBuf> {
    let (algo, hex) = digest.split_once(':').ok_or_else(|| image_err(format!("malformed digest {digest:?}")))?;
    if algo.contains(['/', '.']) || hex.contains(['/', '.']) || hex.is_empty() {
        return Err(image_err(format!("malformed digest {digest:?}")));
    }
    let p = layout.join("blobs").join(algo).join(hex);
    if !p.is_file() {
        return Err(image_err(format!("blob {digest} is missing from {}", layout.display())));
    }
    Ok(p)
}

/// An OCI image layout: index → (nested index →) manifest → config and layers.
fn unpack_layout(layout: &Path, dest: &Path) -> Result<()> {
    let index = ImageIndex::from_file(layout.join("index.json")).map_err(|e| image_err(format!("{}/index.json: {e}", layout.display())))?;
    let mut desc = index.manifests().first().cloned().ok_or_else(|| image_err(format!("{}/index.json lists no image", layout.display())))?;
    if index.manifests().len() > 1 {
        // A multi-image layout: the one built for this machine's architecture.
        let arch = if cfg!(target_arch = "aarch64") { "arm64" } else { "amd64" };
        if let Some(d) = index.manifests().iter().find(|d| d.platform().as_ref().is_some_and(|p| p.architecture().to_string() == arch)) {
            desc = d.clone();
        }
    }
    // A nested index (a multi-platform image) names the manifests one level down.
    for _ in 0..4 {
        let path = blob_path(layout, desc.digest().as_ref())?;
        let text = std::fs::read_to_string(&path).map_err(|source| HostError::Read { path: path.clone(), source })?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| image_err(format!("{}: {e}", path.display())))?;
        if v.get("manifests").is_some() {
            let nested = ImageIndex::from_reader(text.as_bytes()).map_err(|e| image_err(format!("{}: {e}", path.display())))?;
            desc = nested.manifests().first().cloned().ok_or_else(|| image_err("a nested index lists no image"))?;
            continue;
        }
        let manifest = ImageManifest::from_reader(text.as_bytes()).map_err(|e| image_err(format!("manifest {}: {e}", desc.digest())))?;
        let layers: Vec<PathBuf> = manifest.layers().iter().map(|l| blob_path(layout, l.digest().as_ref())).collect::<Result<_>>()?;
        let config = blob_path(layout, manifest.config().digest().as_ref())?;
        return finish(&config, &layers, dest);
    }
    Err(image_err("index nesting deeper than 4 levels"))
}

/// A classic `docker save` archive: manifest.json names the config and the layer tars.
fn unpack_docker(extracted: &Path, dest: &Path) -> Result<()> {
    let mpath = extracted.join("manifest.json");
    let text = std::fs::read_to_string(&mpath).map_err(|source| HostError::Read { path: mpath.clone(), source })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| image_err(format!("manifest.json: {e}")))?;
    let first = v.as_array().and_then(|a| a.first()).ok_or_else(|| image_err("manifest.json lists no image"))?;
    let rel = |s: &serde_json::Value| -> Result<PathBuf> {
        let s = s.as_str().ok_or_else(|| image_err("manifest.json: a path is not a string"))?;
        let p = Path::new(s);
        if p.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(image_err(format!("manifest.json: path {s:?} leaves the archive")));
        }
        Ok(extracted.join(p))
    };
    let config = rel(&first["Config"])?;
    let layers: Vec<PathBuf> =
        first["Layers"].as_array().ok_or_else(|| image_err("manifest.json: no Layers"))?.iter().map(rel).collect::<Result<_>>()?;
    finish(&config, &layers, dest)
}

fn finish(config: &Path, layers: &[PathBuf], dest: &Path) -> Result<()> {
    let rootfs = dest.join("rootfs");
    for l in layers {
        apply_layer(l, &rootfs)?;
    }
    let image = ImageConfiguration::from_file(config).map_err(|e| image_err(format!("image configuration {}: {e}", config.display())))?;
    let spec = runtime_spec(&image);
    spec.save(dest.join("config.json")).map_err(|e| image_err(format!("writing {}/config.json: {e}", dest.display())))
}

/// The runtime configuration an image asks for (what `umoci unpack` writes): the default spec with
/// the image's entrypoint + command, environment, working directory and numeric user.
pub fn runtime_spec(image: &ImageConfiguration) -> oci_spec::runtime::Spec {
    let mut spec = oci_spec::runtime::Spec::default();
    if let (Some(cfg), Some(process)) = (image.config(), spec.process_mut().as_mut()) {
        let mut args: Vec<String> = cfg.entrypoint().clone().unwrap_or_default();
        args.extend(cfg.cmd().clone().unwrap_or_default());
        if !args.is_empty() {
            process.set_args(Some(args));
        }
        if let Some(env) = cfg.env() {
            let mut all: Vec<String> = process.env().clone().unwrap_or_default();
            for e in env {
                let key = e.split('=').next().unwrap_or("");
                all.retain(|x| x.split('=').next() != Some(key));
                all.push(e.clone());
            }
            process.set_env(Some(all));
        }
        if let Some(dir) = cfg.working_dir().as_ref().filter(|d| !d.is_empty()) {
            process.set_cwd(PathBuf::from(dir));
        }
        // Only numeric users: names need the image's /etc/passwd, which runc does not read.
        if let Some(user) = cfg.user().as_ref().filter(|u| !u.is_empty()) {
            let mut parts = user.split(':');
            if let Some(Ok(uid)) = parts.next().map(str::parse::<u32>) {
                let gid = parts.next().and_then(|g| g.parse::<u32>().ok()).unwrap_or(uid);
                let mut u = process.user().clone();
                u.set_uid(uid);
                u.set_gid(gid);
                process.set_user(u);
            }
        }
        process.set_terminal(Some(false));
    }
    spec.set_root(Some(oci_spec::runtime::RootBuilder::default().path("rootfs").readonly(false).build().expect("a root path and flag")));
    // The host's network unless the launch asks for a namespace of its own (OciLaunch::netns), as for
    // a bundle without one; the other default namespaces (pid, ipc, uts, mount) stay.
    if let Some(ns) = spec.linux_mut().as_mut().and_then(|l| l.namespaces_mut().as_mut()) {
        ns.retain(|n| n.typ() != oci_spec::runtime::LinuxNamespaceType::Network);
    }
    spec
}

const WHITEOUT: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

/// A layer tar (gzip, or plain) applied onto `rootfs`: first its whiteouts remove what lower layers
/// put there (`.wh.NAME` deletes NAME, `.wh..wh..opq` empties the directory), then its entries are
/// unpacked. Two passes, because a whiteout applies to the lower layers only and may come after the
/// layer's own entries in the same directory.
pub fn apply_layer(layer: &Path, rootfs: &Path) -> Result<()> {
    let open = || -> Result<Box<dyn Read>> {
        let mut f = File::open(layer).map_err(|source| HostError::Read { path: layer.to_path_buf(), source })?;
        let mut magic = [0u8; 2];
        let n = f.read(&mut magic).map_err(|source| HostError::Read { path: layer.to_path_buf(), source })?;
        f.rewind().map_err(|source| HostError::Read { path: layer.to_path_buf(), source })?;
        Ok(if n == 2 && magic == [0x1f, 0x8b] { Box::new(flate2::read::GzDecoder::new(BufReader::new(f))) } else { Box::new(BufReader::new(f)) })
    };
    // tar's errors wrap the cause ("failed to unpack PATH" around the errno): show both.
    let bad = |e: std::io::Error| {
        let cause = std::error::Error::source(&e).map(|c| format!(" ({c})")).unwrap_or_default();
        image_err(format!("layer {}: {e}{cause}", layer.display()))
    };
    // Pass 1: whiteouts.
    let mut ar = tar::Archive::new(open()?);
    for entry in ar.entries().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.into_owned();
        let Some(rel) = safe_relative(&path) else { continue };
        let Some(name) = rel.file_name().and_then(|n| n.to_str()) else { continue };
        let dir = rootfs.join(rel.parent().unwrap_or(Path::new("")));
        if name == OPAQUE {
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    remove_any(&e.path()).map_err(bad)?;
                }
            }
        } else if let Some(target) = name.strip_prefix(WHITEOUT) {
            let victim = dir.join(target);
            if victim.symlink_metadata().is_ok() {
                remove_any(&victim).map_err(bad)?;
            }
        }
    }
    // Pass 2: the layer's content.
    let mut ar = tar::Archive::new(open()?);
    ar.set_preserve_permissions(true);
    ar.set_preserve_ownerships(true);
    ar.set_unpack_xattrs(false);
    ar.set_overwrite(true);
    for entry in ar.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.into_owned();
        let Some(rel) = safe_relative(&path) else { continue };
        if rel.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(WHITEOUT)) {
            continue;
        }
        // A directory replacing a file (or the reverse) in a lower layer: the new kind wins.
        let target = rootfs.join(&rel);
        if let Ok(meta) = target.symlink_metadata() {
            let is_dir = entry.header().entry_type().is_dir();
            if meta.is_dir() != is_dir || (!is_dir && meta.file_type().is_symlink()) {
                remove_any(&target).map_err(bad)?;
            }
        }
        // `unpack_in` refuses paths that would leave `rootfs` (`..`, symlinked parents).
        entry.unpack_in(rootfs).map_err(bad)?;
    }
    Ok(())
}

/// The path inside the layer without `./` and root prefixes; `None` for `..` or empty paths.
fn safe_relative(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(x) => out.push(x),
            Component::CurDir | Component::RootDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

fn remove_any(p: &Path) -> std::io::Result<()> {
    match p.symlink_metadata() {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            let mut h = tar::Header::new_gnu();
            match data {
                Some(d) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(d.len() as u64);
                    h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
                    h.set_cksum();
                    b.append_data(&mut h, path, *d).unwrap();
                }
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    h.set_uid(0);
                    h.set_gid(0);
                    h.set_mtime(0);
                    h.set_cksum();
                    b.append_data(&mut h, path, &[][..]).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn layers_apply_in_order_with_whiteouts() {
        let d = tempfile::tempdir().unwrap();
        let rootfs = d.path().join("rootfs");
        std::fs::create_dir_all(&rootfs).unwrap();
        let l1 = d.path().join("l1.tar");
        std::fs::write(&l1, tar_of(&[("etc/", None), ("etc/a", Some(b"1")), ("etc/b", Some(b"1")), ("opt/", None), ("opt/x", Some(b"x"))])).unwrap();
        // Layer 2 (gzip): deletes etc/a, empties opt/ (but keeps its own opt/y, listed before the
        // opaque marker), overwrites etc/b.
        let plain = tar_of(&[("etc/.wh.a", Some(b"")), ("opt/y", Some(b"y")), ("opt/.wh..wh..opq", Some(b"")), ("etc/b", Some(b"2"))]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &plain).unwrap();
        let l2 = d.path().join("l2.tar.gz");
        std::fs::write(&l2, gz.finish().unwrap()).unwrap();
        apply_layer(&l1, &rootfs).unwrap();
        apply_layer(&l2, &rootfs).unwrap();
        assert!(!rootfs.join("etc/a").exists());
        assert_eq!(std::fs::read_to_string(rootfs.join("etc/b")).unwrap(), "2");
        assert!(!rootfs.join("opt/x").exists(), "the opaque directory hides lower layers");
        assert_eq!(std::fs::read_to_string(rootfs.join("opt/y")).unwrap(), "y", "but not its own layer");
        assert!(!rootfs.join("opt/.wh..wh..opq").exists() && !rootfs.join("etc/.wh.a").exists());
    }

    #[test]
    fn paths_that_leave_the_rootfs_are_skipped() {
        assert_eq!(safe_relative(Path::new("./etc/x")), Some(PathBuf::from("etc/x")));
        assert_eq!(safe_relative(Path::new("/etc/x")), Some(PathBuf::from("etc/x")));
        assert_eq!(safe_relative(Path::new("../x")), None);
        assert_eq!(safe_relative(Path::new("a/../../x")), None);
    }

    #[test]
    fn the_image_configuration_becomes_the_process() {
        let cfg: ImageConfiguration = serde_json::from_value(serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Entrypoint": ["/bin/emu"], "Cmd": ["--profile", "srsenb"], "Env": ["PATH=/bin", "MODE=lte"], "WorkingDir": "/work", "User": "1000:100"},
            "rootfs": {"type": "layers", "diff_ids": []}
        }))
        .unwrap();
        let s = runtime_spec(&cfg);
        let p = s.process().as_ref().unwrap();
        assert_eq!(p.args().as_ref().unwrap(), &vec!["/bin/emu".to_string(), "--profile".into(), "srsenb".into()]);
        let env = p.env().as_ref().unwrap();
        assert!(env.contains(&"MODE=lte".to_string()));
        assert_eq!(env.iter().filter(|e| e.starts_with("PATH=")).count(), 1, "{env:?}");
        assert_eq!(p.cwd(), &PathBuf::from("/work"));
        assert_eq!((p.user().uid(), p.user().gid()), (1000, 100));
    }
}
