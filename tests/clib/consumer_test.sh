#!/usr/bin/env bash
# The consumer's view of libvoltlock: `cmake --install` into a scratch prefix, then compile the
# example as plain C11 against the installed header and library found through pkg-config, and
# check it links to the installed shared library (not the build tree's) and exports only vl_*.
set -euo pipefail
build=$1
example=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" --component Unspecified >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
export PKG_CONFIG_PATH=$libdir
cc -std=c11 -Wall -Wextra -Werror -pedantic "$example" \
   $(pkg-config --cflags --libs voltlock) -o "$prefix/fenced_write"
# grep without -q reads all of ldd's output: -q exits at the first match, and ldd, cut off, fails
# the pipeline under pipefail now and then.
LD_LIBRARY_PATH=$(dirname "$libdir") ldd "$prefix/fenced_write" |
    grep "$prefix/.*libvoltlock.so.0" >/dev/null
# Static too, through pkg-config --static.
cc -std=c11 -Wall -Wextra -Werror -pedantic "$example" -static-libgcc \
   $(pkg-config --cflags voltlock) "$(dirname "$libdir")/libvoltlock.a" \
   $(pkg-config --libs-only-l --static voltlock | sed 's/-lvoltlock//') -o "$prefix/fenced_write_static"
# Only the C API leaves the shared library (and the names of its version nodes, type A).
symbols=$(nm -D --defined-only "$(dirname "$libdir")"/libvoltlock.so.0)
others=$(awk '$2 != "A" {print $3}' <<<"$symbols" | grep -v '^vl_' || true)
if [ -n "$others" ]; then echo "exported beyond vl_*: $others"; exit 1; fi
# The calls of 0.1 in its node; those added since in theirs (client/c/src/voltlock.map).
for symbol in vl_put@@VOLTLOCK_0.1 vl_snapshot_save@@VOLTLOCK_0.1 vl_role_put@@VOLTLOCK_0.2 \
              vl_tokens_list@@VOLTLOCK_0.2 vl_permission_name@@VOLTLOCK_0.2; do
    grep -q " $symbol\$" <<<"$symbols" || { echo "not exported: $symbol"; exit 1; }
done
# The CMake package config finds it too.
test -f "$(dirname "$libdir")/cmake/voltlock/voltlockConfig.cmake"
echo "consumer: built against $prefix through pkg-config (shared and static)"
