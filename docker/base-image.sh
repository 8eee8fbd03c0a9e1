#!/usr/bin/env bash
# Make a local Python 3.11 base image without a container registry: Debian bookworm (minbase, from the host's own
# apt sources) with python3 and a venv at /opt/python first on PATH, imported as IMAGE. Debian's python refuses
# `pip install` into the system (PEP 668), hence the venv; `python` and `pip` then behave as in python:3.11-slim.
#   usage: docker/base-image.sh IMAGE                make the root file system and import it as IMAGE
#          docker/base-image.sh --rootfs TAR         only make it, as a tar (no engine needed: CI starts this early)
#          docker/base-image.sh --import TAR IMAGE   import a tar made by --rootfs
# As root; needs debootstrap; DOCKER names the docker command.
set -euo pipefail
suite=bookworm  # Debian 12 ships Python 3.11, the version of the python:3.11-slim default base.

make_rootfs() {  # make_rootfs TAR: the root file system as a tar, and beside it (TAR.python) its Python's version
    local tar=$1 mirror root
    # The mirror the host's apt already uses for that suite (empty: debootstrap's own default).
    mirror=$(apt-get indextargets --format '$(SITE) $(CODENAME)' 'Identifier: Packages' 2>/dev/null \
             | awk -v s="$suite" '$2 == s { print $1; exit }') || true
    root=$(mktemp -d /var/tmp/cyphal-servo-rootfs.XXXXXX)
    # shellcheck disable=SC2064  # the folder of this call
    trap "cleanup '$root'" EXIT
    debootstrap --variant=minbase --include=python3,python3-venv "$suite" "$root" ${mirror:+"$mirror"} \
        >"$root.log" 2>&1 || { tail -20 "$root.log" >&2; rm -f "$root.log"; exit 1; }
    rm -f "$root.log"
    chroot "$root" /usr/bin/python3 -m venv /opt/python
    chroot "$root" /opt/python/bin/python -m pip --version >/dev/null
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc "$root"/usr/share/man
    chroot "$root" /opt/python/bin/python -V >"$tar.python"
    tar -C "$root" --numeric-owner -cf "$tar.part" . && mv "$tar.part" "$tar"
}

cleanup() {  # debootstrap mounts /proc and /sys in the target while it works; a failure can leave them mounted.
    awk -v r="$1" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r \
        | while read -r m; do umount -l "$m" || true; done
    rm -rf --one-file-system "$1"
}

import_rootfs() {  # import_rootfs TAR IMAGE
    "${DOCKER:-docker}" import \
        --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python"]' \
        "$1" "$2" >/dev/null
    echo "base image $2: Debian $suite, $(cat "$1.python")"
}

case "${1:?usage: base-image.sh IMAGE | --rootfs TAR | --import TAR IMAGE}" in
    --rootfs) make_rootfs "${2:?--rootfs TAR}" ;;
    --import) import_rootfs "${2:?--import TAR IMAGE}" "${3:?--import TAR IMAGE}" ;;
    *)
        tar=$(mktemp -u /var/tmp/cyphal-servo-rootfs.XXXXXX.tar)
        trap 'rm -f "$tar" "$tar.python" "$tar.part"' EXIT
        (make_rootfs "$tar")
        import_rootfs "$tar" "$1"
        ;;
esac
