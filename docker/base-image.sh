#!/usr/bin/env bash
# Make a local Python 3.11 base image without a container registry: Debian bookworm (minbase, from the host's own
# apt sources) with python3 and a venv at /opt/python first on PATH, imported as IMAGE. Debian's python refuses
# `pip install` into the system (PEP 668), hence the venv; `python` and `pip` then behave as in python:3.11-slim.
#   usage: docker/base-image.sh IMAGE          (as root; needs debootstrap; DOCKER names the docker command)
set -euo pipefail
image=${1:?usage: base-image.sh IMAGE}
docker_cmd=${DOCKER:-docker}
suite=bookworm  # Debian 12 ships Python 3.11, the version of the python:3.11-slim default base.

# The mirror the host's apt already uses for that suite (empty: debootstrap's own default).
mirror=$(apt-get indextargets --format '$(SITE) $(CODENAME)' 'Identifier: Packages' 2>/dev/null \
         | awk -v s="$suite" '$2 == s { print $1; exit }') || true

root=$(mktemp -d /var/tmp/cyphal-servo-rootfs.XXXXXX)
cleanup() {
    # debootstrap mounts /proc and /sys in the target while it works; a failure can leave them mounted.
    awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r \
        | while read -r m; do umount -l "$m" || true; done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT

debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$root" ${mirror:+"$mirror"} >"$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"
chroot "$root" /usr/bin/python3 -m venv /opt/python
chroot "$root" /opt/python/bin/python -m pip --version >/dev/null
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc "$root"/usr/share/man
tar -C "$root" --numeric-owner -c . | "$docker_cmd" import \
    --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python"]' \
    - "$image" >/dev/null
echo "base image $image: Debian $suite, $(chroot "$root" /opt/python/bin/python -V)"
