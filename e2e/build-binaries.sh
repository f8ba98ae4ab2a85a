#!/usr/bin/env bash
# Build (once) the real Kubernetes parts the end-to-end tests and the demo run:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes v1.35.4)
#   etcd (go.etcd.io/etcd/server/v3), kwok (sigs.k8s.io/kwok), helm (helm.sh/helm/v3)
#   the job operators whose PodGroups e2e/test_operators.py schedules: mpi-operator
#   (github.com/kubeflow/mpi-operator) and the training-operator (github.com/kubeflow/training-operator)
#   prometheus (github.com/prometheus/prometheus/cmd/prometheus, without service discovery
#   plugins and web UI assets: the dashboard test scrapes a static target through the HTTP API)
#   toxiproxy-server (github.com/Shopify/toxiproxy/v2/cmd/server): the fault-injecting TCP proxy
#   that e2e/faults/ puts between ome-scheduler and kube-apiserver
#   scheduler-plugins' scheduler (sigs.k8s.io/scheduler-plugins v0.34.7 cmd/scheduler, as
#   "scheduler-plugins"): kube-scheduler 1.34.7 with Coscheduling, the gang scheduler bench/run.py
#   compares with (built with -mod=mod, see e2e/tools/scheduler-plugins/go.mod)
#   celdiff (e2e/tools/celdiff, its own main package): DRA CEL device selectors evaluated by
#   k8s.io/dynamic-resource-allocation@v0.35.4/cel, for tests/dra/test_cel_differential.py
#   the LeaderWorkerSet controller manager (sigs.k8s.io/lws v0.5.1 cmd, as "lws-controller") and
#   OME's controller-manager (github.com/sgl-project/ome cmd/manager, as "ome-manager"), the
#   clients e2e/test_lws.py runs (see docs/ome-and-lws.md)
# from the wrapper modules under e2e/tools/, whose go.mod and go.sum are committed. OME's module
# is not served by the module proxy: e2e/tools/ome/ holds a source snapshot of it instead
# (ome-17b77ed.tgz, Apache-2.0, see its README.md), extracted in the cache at build time, and
# xet_stub.c, our stand-in for the Rust library it links through cgo (that set needs gcc, g++'s
# libstdc++ and the OpenSSL development files: Debian's gcc, g++ and libssl-dev).
#
# Every binary set is cached outside the checkout, in a directory keyed by the wrapper's
# go.sum (OME's: its snapshot and stub) and the build flags, so a fresh clone on the same
# machine (CI included) reuses it:
#   ${XDG_CACHE_HOME:-~/.cache}/ome-scheduler/bin/<set>-<key>/
# and a symlink farm ${XDG_CACHE_HOME:-~/.cache}/ome-scheduler/bin/current/ points at them.
# Prints the directory of the binaries on its last line.
#
#   e2e/build-binaries.sh [SET...]   only the named sets (e.g. `celdiff`), same cache and output
set -euo pipefail
only=" $* "

here=$(cd "$(dirname "$0")" && pwd)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ome-scheduler/bin
mkdir -p "$cache/current"
export CGO_ENABLED=0
# One build at a time per cache: concurrent runs (two checkouts, a test and `make`) wait here
# and then find the binaries cached instead of writing into the same directory.
exec 9>"$cache/.lock"
flock 9

K8S_VERSION=v1.35.4
ld_k8s="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld_k8s="$ld_k8s -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=35"
  ld_k8s="$ld_k8s -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done
ETCD_VERSION=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$here/tools/etcd/go.mod")
ld_etcd="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION"
HELM_VERSION=$(awk '$1=="helm.sh/helm/v3"{print $2}' "$here/tools/helm/go.mod")
ld_helm="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
PROM_MODULE=$(awk '$1=="github.com/prometheus/prometheus"{print $2}' "$here/tools/prometheus/go.mod")
# Prometheus 3.Y.Z is published to the module proxy as v0.(300+Y).Z.
PROM_MINOR=$(echo "$PROM_MODULE" | sed -E 's/^v0\.([0-9]+)\..*/\1/')
PROM_VERSION="3.$((PROM_MINOR - 300)).$(echo "$PROM_MODULE" | sed -E 's/^v0\.[0-9]+\.([0-9]+).*/\1/')"
ld_prom="-s -w -X github.com/prometheus/common/version.Version=$PROM_VERSION -X github.com/prometheus/common/version.Branch=HEAD"
KWOK_VERSION=$(awk '$1=="sigs.k8s.io/kwok"{print $2}' "$here/tools/kwok/go.mod")
ld_kwok="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION"
MPI_VERSION=$(awk '$1=="github.com/kubeflow/mpi-operator"{print $2}' "$here/tools/mpi-operator/go.mod")
ld_mpi="-s -w -X github.com/kubeflow/mpi-operator/pkg/version.Version=$MPI_VERSION"
TOXI_VERSION=$(awk '$1=="github.com/Shopify/toxiproxy/v2"{print $2}' "$here/tools/toxiproxy/go.mod")
ld_toxi="-s -w -X github.com/Shopify/toxiproxy/v2.Version=$TOXI_VERSION"
# scheduler-plugins v0.34.7 is built on Kubernetes 1.34.7 libraries; it refuses to start with
# its own module version (v0.34.7) as gitVersion, so it carries the Kubernetes one.
ld_sp="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld_sp="$ld_sp -X $p.gitVersion=v1.34.7 -X $p.gitMajor=1 -X $p.gitMinor=34"
  ld_sp="$ld_sp -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done

ld_lws="-s -w"
ld_ome="-s -w -X github.com/sgl-project/ome/pkg/version.GitVersion=v0.1.5-17b77ed -X github.com/sgl-project/ome/pkg/version.GitCommit=17b77edad23bae262e0c9adb7f12039397a5d33d"

# The go command names a binary after its package path's last element, skipping a /vN suffix.
binname() { local b; b=$(basename "$1"); [[ $b =~ ^v[0-9]+$ ]] && b=$(basename "$(dirname "$1")"); echo "$b"; }

# set_dir <set> <ldflags> <package>...: the cache directory of a binary set (keyed by the
# wrapper's go.sum, or the files SNAPSHOT names, and the build flags, including TAGS and
# MODMOD); succeeds when every binary of the set is there.
set_dir() {
  local set=$1 ld=$2; shift 2
  local tags=${TAGS:-selinux,notest}
  local modmod=${MODMOD:-0}
  # The default tags leave the key as it was before tags were configurable (caches stay warm).
  local flags="$ld $*"
  [ "$tags" = "selinux,notest" ] || flags="$flags tags=$tags"
  [ "$modmod" = 0 ] || flags="$flags mod=mod"
  local keyfiles=(go.sum)
  [ -z "${SNAPSHOT:-}" ] || read -ra keyfiles <<<"$SNAPSHOT $STUB"
  local dir
  # A wrapper with its own main package (celdiff) keys its cache by its source too.
  [ -f "$here/tools/$set/main.go" ] && keyfiles+=(main.go)
  dir="$cache/$set-$(cd "$here/tools/$set" && cat "${keyfiles[@]}" <(echo "$flags") | sha256sum | cut -c1-12)"
  echo "$dir"
  local p
  for p in "$@"; do [ -x "$dir/$(binname "$p")" ] || return 1; done
}

# [TAGS=...] [MODMOD=1] [NAME=...] [SNAPSHOT=... STUB=...] build <set> <ldflags> <package>...
#   TAGS: Go build tags, default selinux,notest
#   MODMOD=1: no `go mod download`, and `go build -mod=mod` (for a wrapper whose module graph
#   names versions the proxy refuses but the build never needs)
#   NAME: the name in current/ of the set's one binary, when its package's last element
#   ("server", "scheduler") would say nothing
#   SNAPSHOT, STUB: the set is not a wrapper module but a source snapshot, e2e/tools/<set>/$SNAPSHOT
#   (a .tgz of one module in its top directory), built with cgo after STUB (a C file there) is
#   compiled into the static library pkg/xet/target/release/libxet.a of the module; its
#   packages are relative (./cmd/...)
build() {
  local set=$1 ld=$2; shift 2
  local tags=${TAGS:-selinux,notest}
  local dir
  if dir=$(set_dir "$set" "$ld" "$@"); then
    echo "==> $set cached in $dir" >&2
  else
    echo "==> building $set ($*) into $dir; a cold build takes minutes" >&2
    local start=$SECONDS
    local tmp
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    if [ -n "${SNAPSHOT:-}" ]; then
      build_snapshot "$set" "$ld" "$tags" "$tmp" "$@"
    elif [ "${MODMOD:-0}" = 0 ]; then
      (cd "$here/tools/$set" && go mod download && \
        go build -trimpath -tags="$tags" -ldflags="$ld" -o "$tmp/" "$@") >&2
    else
      # A copy of the wrapper, so that -mod=mod never rewrites the committed go.mod/go.sum.
      local src
      src=$(mktemp -d)
      cp "$here/tools/$set"/* "$src/"
      (cd "$src" && go build -mod=mod -trimpath -tags="$tags" -ldflags="$ld" -o "$tmp/" "$@") >&2
      rm -rf "$src"
    fi
    rm -rf "$dir" && mv "$tmp" "$dir"
    echo "==> $set built in $((SECONDS - start)) s" >&2
  fi
  local p
  for p in "$@"; do ln -sfn "$dir/$(binname "$p")" "$cache/current/${NAME:-$(binname "$p")}"; done
}

# build_snapshot <set> <ldflags> <tags> <outdir> <package>...: build a SNAPSHOT set into <outdir>.
# The snapshot is extracted next to <outdir> (in the cache, outside the checkout) and removed
# after the build.
build_snapshot() {
  local set=$1 ld=$2 tags=$3 out=$4; shift 4
  local missing=()
  command -v gcc >/dev/null 2>&1 || missing+=(gcc)
  [ -e "$(gcc -print-file-name=libstdc++.so 2>/dev/null)" ] || missing+=("g++ (libstdc++.so)")
  [ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "build-binaries.sh: $set links C code through cgo and needs ${missing[*]}" \
      "(Debian: apt-get install gcc g++ libssl-dev)" >&2
    return 1
  fi
  local src
  src=$(mktemp -d "$out.src.XXXXXX")
  (
    trap 'rm -rf "$src"' EXIT
    tar -xzf "$here/tools/$set/$SNAPSHOT" -C "$src"
    top=("$src"/*/) # the module's one top directory
    xet="${top[0]}pkg/xet"
    mkdir -p "$xet/target/release"
    gcc -c -O2 -I "$xet" "$here/tools/$set/$STUB" -o "$xet/target/release/stub.o"
    ar rcs "$xet/target/release/libxet.a" "$xet/target/release/stub.o"
    cd "${top[0]}"
    go mod download
    CGO_ENABLED=1 go build -trimpath -tags="$tags" -ldflags="$ld" -o "$out/" "$@"
  ) >&2
}

# prefetch <set> <ldflags> <package>...: when the set is not cached, download its wrapper's
# modules in the background. The network, not the CPU, bounds a download, so on a cold machine
# every set downloads at once while the builds (one at a time, each using every core) go on.
# A failed prefetch is harmless: build's own `go mod download` reports the error. A -mod=mod
# wrapper downloads what its build needs, during the build.
prefetch() {
  local set=$1
  [ "${MODMOD:-0}" = 0 ] || return 0
  set_dir "$@" >/dev/null && return 0
  if [ -n "${SNAPSHOT:-}" ]; then
    # go mod download needs only the snapshot's go.mod and go.sum.
    local tgz="$here/tools/$set/$SNAPSHOT"
    (src=$(mktemp -d) && trap 'rm -rf "$src"' EXIT && tar -xzf "$tgz" -C "$src" --wildcards '*/go.mod' '*/go.sum' &&
      cd "$src"/*/ && go mod download) >/dev/null 2>&1 &
    return 0
  fi
  (cd "$here/tools/$set" && go mod download) >/dev/null 2>&1 &
}

# each_set <command>: runs <command> <set> <ldflags> <package>... for every binary set, in
# build order (the env prefixes are build's options).
each_set() {
  NAME=etcd "$1" etcd "$ld_etcd" go.etcd.io/etcd/server/v3
  "$1" k8s "$ld_k8s" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
  "$1" kwok "$ld_kwok" sigs.k8s.io/kwok/cmd/kwok
  "$1" helm "$ld_helm" helm.sh/helm/v3/cmd/helm
  "$1" mpi-operator "$ld_mpi" github.com/kubeflow/mpi-operator/cmd/mpi-operator
  "$1" training-operator "-s -w" github.com/kubeflow/training-operator/cmd/training-operator.v1
  NAME=toxiproxy-server "$1" toxiproxy "$ld_toxi" github.com/Shopify/toxiproxy/v2/cmd/server
  TAGS=remove_all_sd "$1" prometheus "$ld_prom" github.com/prometheus/prometheus/cmd/prometheus
  MODMOD=1 NAME=scheduler-plugins "$1" scheduler-plugins "$ld_sp" sigs.k8s.io/scheduler-plugins/cmd/scheduler
  "$1" celdiff "-s -w" example.invalid/celdiff
  NAME=lws-controller "$1" lws "$ld_lws" sigs.k8s.io/lws/cmd
  SNAPSHOT=ome-17b77ed.tgz STUB=xet_stub.c NAME=ome-manager "$1" ome "$ld_ome" ./cmd/manager
}

# only_named <command> <set> ...: runs <command> for the sets named on the command line (all
# when none is).
only_named() {
  local cmd=$1 set=$2
  [ "$only" = "  " ] || [[ $only == *" $set "* ]] || return 0
  "$cmd" "${@:2}"
}
prefetch_named() { only_named prefetch "$@"; }
build_named() { only_named build "$@"; }

each_set prefetch_named
each_set build_named
wait # for the prefetches (finished by now: each build downloaded its set's modules too)

[ "$only" != "  " ] || "$cache/current/kube-apiserver" --version >&2
echo "$cache/current"
