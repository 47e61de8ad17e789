#!/usr/bin/env bash
# Builds rollboot's two container images as OCI image archives, offline: nothing is pulled, no
# container engine is needed. From the repository root:
#
#   scripts/build-image.sh            # target/image/rollboot-controller.tar, rollboot-agent.tar
#
# Each archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) in a tar, with
# one layer: the binary built without the simulator (`--no-default-features`), the shared
# libraries it links (as `ldd` resolves them on this machine, glibc's loader included), the
# CA certificates (/etc/ssl/certs/ca-certificates.crt), /etc/passwd and /etc/group with root
# and `nonroot` (65532), /tmp, and the man pages the binary writes of itself (`rollboot man`,
# in /usr/share/man/man1). The agent's adds nsenter (util-linux) and its libraries: the
# default `reboot.command` enters PID 1's mount namespace with it. The controller runs as
# 65532:65532, the agent as root (deploy/agent.yaml says why).
#
# Names: `rollboot:VERSION` and `rollboot-agent:VERSION` (the ones deploy/ and the Helm chart
# run), in the index as `org.opencontainers.image.ref.name` (VERSION) and containerd's
# `io.containerd.image.name` (docker.io/library/NAME:VERSION), so `kind load image-archive`,
# `ctr images import` and `skopeo copy oci-archive:...` all take them (deploy/INSTALL.md).
# The manifest digest of each is printed. The archives are reproducible: file times are
# SOURCE_DATE_EPOCH (default: the last commit's time), owners 0, gzip without a timestamp.
#
# Environment:
#   PROFILE   cargo profile of the binary (default dist; the image test uses image-test, which
#             builds faster)
#   OUT       where the archives go (default target/image)
#   BINARY    use this binary instead of building one (it must be built without `simulate`)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${PROFILE:-dist}
out=${OUT:-target/image}
if [ -z "${BINARY:-}" ]; then
  # Packed relative relocations, as deploy/Dockerfile builds it (smaller resident agent).
  RUSTFLAGS="${RUSTFLAGS:-} -C link-arg=-Wl,-z,pack-relative-relocs" \
    cargo build --profile "$profile" --locked --no-default-features --bin rollboot >&2
  BINARY=${CARGO_TARGET_DIR:-target}/$profile/rollboot
fi
for tool in ldd python3; do
  command -v "$tool" >/dev/null || { echo "build-image.sh: $tool is needed" >&2; exit 1; }
done
nsenter=$(command -v nsenter || true)
if [ -z "$nsenter" ]; then
  echo "build-image.sh: nsenter (Debian package util-linux) is needed for the agent's image" >&2
  exit 1
fi
# The man pages, from the binary that goes in (so they describe it, without `simulate`).
man_dir=$(mktemp -d)
trap 'rm -rf "$man_dir"' EXIT
"$BINARY" man --out "$man_dir" >/dev/null
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
mkdir -p "$out"
python3 - "$BINARY" "$nsenter" "$out" "$version" "$revision" "$epoch" "$man_dir" <<'PY'
import gzip, hashlib, io, json, os, re, subprocess, sys, tarfile, time

binary, nsenter, out, version, revision, epoch, man_dir = sys.argv[1:8]
epoch = int(epoch)

def libraries(path):
    """The shared objects `path` loads, as ldd resolves them here (the loader included)."""
    text = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    if "not a dynamic executable" in text or "statically linked" in text:
        return []
    libs = []
    for line in text.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.append(m.group(1))
        elif "=>" in line and "not found" in line:
            sys.exit(f"build-image.sh: {path} needs a library ldd cannot find: {line.strip()}")
    return libs

PASSWD = b"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
GROUP = b"root:x:0:\nnonroot:x:65532:\n"

def layer(files):
    """A gzip'd tar of `files` ({path in image: bytes or (source path,)}) with its parent
    directories and /tmp, in name order, owned by 0, dated `epoch`; (compressed, uncompressed)."""
    entries = {}
    def parents(p):
        parts = p.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            entries.setdefault("/".join(parts[:i]), ("dir", 0o755))
    for path, what in files.items():
        parents(path)
        data = what if isinstance(what, bytes) else open(what[0], "rb").read()
        mode = 0o755 if not isinstance(what, bytes) and os.access(what[0], os.X_OK) else 0o644
        entries[path.strip("/")] = ("file", mode, data)
    entries["tmp"] = ("dir", 0o1777)
    entries.setdefault("home", ("dir", 0o755))
    entries["home/nonroot"] = ("dir", 0o755)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            e = entries[name]
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            if name == "home/nonroot":
                info.uid = info.gid = 65532
            if e[0] == "dir":
                info.type, info.mode = tarfile.DIRTYPE, e[1]
                tar.addfile(info)
            else:
                info.mode, info.size = e[1], len(e[2])
                tar.addfile(info, io.BytesIO(e[2]))
    uncompressed = raw.getvalue()
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(uncompressed)
    return packed.getvalue(), uncompressed

def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()

def image(name, file, role, user, extra):
    files = {"/usr/local/bin/rollboot": (binary,), "/etc/passwd": PASSWD, "/etc/group": GROUP,
             "/etc/ssl/certs/ca-certificates.crt": ("/etc/ssl/certs/ca-certificates.crt",)}
    for lib in libraries(binary):
        files[lib] = (os.path.realpath(lib),)
    for page in os.listdir(man_dir):
        files["/usr/share/man/man1/" + page] = (os.path.join(man_dir, page),)
    for path in extra:
        files[path] = (path,)
        for lib in libraries(path):
            files[lib] = (os.path.realpath(lib),)
    compressed, uncompressed = layer(files)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    labels = {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.description": f"rollboot {role}: safe, unattended node reboots for Kubernetes",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": created,
        "dev.rollboot.role": role,
    }
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": user,
            "Entrypoint": ["/usr/local/bin/rollboot"],
            "Cmd": [role, "--help"],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin",
                    "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],
            "WorkingDir": "/",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [sha(uncompressed)]},
        "history": [{"created": created, "created_by": "scripts/build-image.sh"}],
    }
    if role == "controller":
        config["config"]["ExposedPorts"] = {"8080/tcp": {}}
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(config_bytes), "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha(compressed), "size": len(compressed)}],
        "annotations": {k: v for k, v in labels.items() if k.startswith("org.opencontainers")},
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha(manifest_bytes), "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {
                "org.opencontainers.image.ref.name": version,
                "io.containerd.image.name": f"docker.io/library/{name}:{version}",
            },
        }],
    }
    layout = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
              "index.json": json.dumps(index, sort_keys=True, indent=2).encode()}
    for blob in (config_bytes, manifest_bytes, compressed):
        layout["blobs/sha256/" + sha(blob).split(":")[1]] = blob
    path = os.path.join(out, file)
    with open(path + ".part", "wb") as f:
        with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for d in ("blobs", "blobs/sha256"):
                info = tarfile.TarInfo(d)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
                tar.addfile(info)
            for entry in sorted(layout):
                info = tarfile.TarInfo(entry)
                info.size, info.mode, info.mtime = len(layout[entry]), 0o644, epoch
                tar.addfile(info, io.BytesIO(layout[entry]))
    os.replace(path + ".part", path)
    size = os.path.getsize(path)
    print(f"{path}\t{name}:{version}\t{sha(manifest_bytes)}\t{size / 1e6:.1f} MB")

image("rollboot", "rollboot-controller.tar", "controller", "65532:65532", [])
image("rollboot-agent", "rollboot-agent.tar", "agent", "0:0", [nsenter])
PY
