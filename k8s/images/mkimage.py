#!/usr/bin/env python3
"""Write a single-layer OCI image archive (an OCI image layout in a tar) from local files only.

No registry, no daemon: the layer is a tar of the files given, the config and manifest are written
by hand, and the archive is what `ctr -n k8s.io images import` takes. The image's name is set both
as `io.containerd.image.name` (which containerd's import uses) and `org.opencontainers.image.ref.name`.

usage: mkimage.py OUT.tar NAME --entrypoint JSON [--file SRC:DEST[:MODE]]... [--symlink DEST:TARGET]...
Every file is stored root-owned with mtime 0, so the same inputs give the same image digest (the
harness rebuilds an image only when its digest would change).
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tarfile


def add_dirs(tar, seen, path):
    parts = path.strip("/").split("/")[:-1]
    for i in range(1, len(parts) + 1):
        d = "/".join(parts[:i])
        if d in seen:
            continue
        seen.add(d)
        info = tarfile.TarInfo(d)
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
        tar.addfile(info)


def layer(files, symlinks):
    buf = io.BytesIO()
    seen = set()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("tmp", "proc", "sys", "dev", "etc"):
            seen.add(d)
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for src, dest, mode in files:
            add_dirs(tar, seen, dest)
            data = open(src, "rb").read()
            info = tarfile.TarInfo(dest.strip("/"))
            info.size = len(data)
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))
        for dest, target in symlinks:
            add_dirs(tar, seen, dest)
            info = tarfile.TarInfo(dest.strip("/"))
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


def blob(tar, data, media_type):
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("name", help="full reference, e.g. docker.io/rtslice/busybox:e2e")
    p.add_argument("--entrypoint", default="[]", help="JSON list")
    p.add_argument("--file", action="append", default=[], help="SRC:DEST[:octal mode]")
    p.add_argument("--symlink", action="append", default=[], help="DEST:TARGET")
    a = p.parse_args()
    files = []
    for f in a.file:
        parts = f.split(":")
        if len(parts) not in (2, 3) or not os.path.isfile(parts[0]):
            sys.exit(f"mkimage: --file {f}: expected SRC:DEST[:MODE] with SRC an existing file")
        files.append((parts[0], parts[1], int(parts[2], 8) if len(parts) == 3 else 0o755))
    symlinks = [tuple(s.split(":", 1)) for s in a.symlink]
    data = layer(files, symlinks)
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": json.loads(a.entrypoint), "Env": ["PATH=/bin:/usr/bin:/sbin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w") as tar:
        lay = blob(tar, data, "application/vnd.oci.image.layer.v1.tar")
        cfg = blob(tar, json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cfg, "layers": [lay]}
        man = blob(tar, json.dumps(manifest, sort_keys=True).encode(), "application/vnd.oci.image.manifest.v1+json")
        man["annotations"] = {"io.containerd.image.name": a.name,
                              "org.opencontainers.image.ref.name": a.name.rsplit(":", 1)[-1]}
        man["platform"] = {"architecture": "amd64", "os": "linux"}
        for name, content in (("oci-layout", {"imageLayoutVersion": "1.0.0"}),
                              ("index.json", {"schemaVersion": 2, "manifests": [man]})):
            raw = json.dumps(content).encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(raw))
    os.replace(tmp, a.out)
    print(man["digest"])


if __name__ == "__main__":
    main()
