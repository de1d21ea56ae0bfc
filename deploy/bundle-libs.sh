#!/bin/bash
# bundle-libs.sh KILND DEST: copy every shared library KILND loads (per ldd) into DEST, except the
# C/C++ runtime that any glibc >= 2.36 base image already has. Used by Dockerfile.cuda, whose base
# (NVIDIA's CUDA runtime on Ubuntu) has other package names than the Debian 12 build stage: kilnd
# runs there with LD_LIBRARY_PATH=DEST. tests/deploy runs it and starts kilnd on the result.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 KILND DEST" >&2
  exit 2
fi
kilnd="$1"
dest="$2"
mkdir -p "$dest"

# Provided by the base image's glibc and GCC runtime (newer there than in Debian 12, and
# backward compatible), and never bundled: mixing two glibcs in one process breaks it.
system_libs='^(linux-vdso\.so|ld-linux[^ ]*|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so)'

missing="$(ldd "$kilnd" | awk '/not found/ {print $1}')"
if [[ -n "$missing" ]]; then
  echo "bundle-libs: unresolved libraries: $missing" >&2
  exit 1
fi
ldd "$kilnd" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r soname path; do
  if [[ "$soname" =~ $system_libs ]]; then
    continue
  fi
  cp -L "$path" "$dest/$soname"
done
