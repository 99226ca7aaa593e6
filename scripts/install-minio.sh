#!/usr/bin/env bash
# Builds the MinIO server the integration tests and benchmarks run against, once per version.
#
# MinIO ships as source only, so it is built with the local Go toolchain. The binary is kept
# under $OBJECTCACHE_MINIO_CACHE/<version>/minio (default ~/.cache/objectcache/minio) and reused
# when that version is already there. Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

# The pinned version (DEVELOPMENT build of 2026-02-12, commit 7aac2a2c5b7c).
MINIO_VERSION="${OBJECTCACHE_MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
CACHE_ROOT="${OBJECTCACHE_MINIO_CACHE:-${HOME}/.cache/objectcache/minio}"
TARGET_DIR="${CACHE_ROOT}/${MINIO_VERSION}"
BINARY="${TARGET_DIR}/minio"

if [[ -x "${BINARY}" ]]; then
  echo "minio ${MINIO_VERSION} already built at ${BINARY}" >&2
  echo "${BINARY}"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "install-minio: the Go toolchain (go) is required to build MinIO; install Go >= 1.24" >&2
  exit 1
fi

mkdir -p "${TARGET_DIR}"
BUILD_DIR="$(mktemp -d "${TARGET_DIR}/.build.XXXXXX")"
trap 'rm -rf "${BUILD_DIR}"' EXIT

echo "install-minio: building github.com/minio/minio@${MINIO_VERSION} (takes a few minutes)" >&2
# GOBIN to a scratch folder, then an atomic rename: an interrupted build never leaves a
# half-written binary where the next run would trust it.
( cd "${BUILD_DIR}" && GOTOOLCHAIN=local GOBIN="${BUILD_DIR}" GOFLAGS="${GOFLAGS:-} -trimpath" \
    go install "github.com/minio/minio@${MINIO_VERSION}" ) >&2
mv "${BUILD_DIR}/minio" "${BINARY}"
echo "install-minio: built ${BINARY}" >&2
echo "${BINARY}"
