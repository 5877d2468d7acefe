#!/usr/bin/env bash
# Builds the image localhost/kxp:latest FROM scratch: the release `kxp`, stripped, the shared
# libraries it links (as `ldd` resolves them: glibc's loader, libc, libm, libgcc_s), the CA
# certificates, a passwd file naming the non-root user, /tmp (mode 1777: `kxp demo` writes its
# SQLite files there) and /data (the working directory and default database). No shell.
#
# Usage: deploy/container/build.sh [KXP_BINARY]
#   KXP_BINARY: a build of `kxp` (default target/release/kxp, built if missing; CI passes the
#   debug build its tests made, to stay within its time budget).
# Prints the image's size. Needs podman (Debian: podman runc) and runs as root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:-$root/target/release/kxp}
if [ ! -x "$bin" ]; then
    (cd "$root" && cargo build --release --locked -p kxp-cli --bin kxp)
fi
export CONTAINERS_CONF="$here/containers.conf"

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
rootfs="$context/rootfs"
mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$context/data"
chmod 1777 "$rootfs/tmp"
strip -o "$rootfs/usr/local/bin/kxp" "$bin"
# Each library at the path the loader finds it by (Debian's glibc searches the multiarch
# directories without an ld.so.cache); the loader at the path the binary names (PT_INTERP).
libraries=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
for library in $libraries; do
    mkdir -p "$rootfs$(dirname "$library")"
    cp -L "$library" "$rootfs$library"
done
if ldd "$bin" | grep -q 'not found'; then
    echo "a library of $bin was not found: $(ldd "$bin" | grep 'not found')" >&2
    exit 1
fi
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/nonexistent\nkxp:x:10001:10001:kxp:/data:/nonexistent\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nkxp:x:10001:\n' > "$rootfs/etc/group"
printf 'hosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$rootfs/etc/hosts"
cp "$here/Containerfile" "$context/Containerfile"

# Docker format: an OCI image would drop the HEALTHCHECK.
podman build --quiet --format docker --tag localhost/kxp:latest "$context" >/dev/null
size=$(podman image inspect localhost/kxp:latest --format '{{.Size}}')
echo "localhost/kxp:latest: $((size / 1000000)) MB ($size bytes)"
