#!/usr/bin/env bash
# pause-image.sh builds the test cluster's pause image (test/cmd/pause, static) with the image tool
# of hack/image into bin/cluster/pause.tar (an OCI layout tarball, for ctr images import), named
# localhost/actionledger/pause:1.0. Cached: skipped when the tarball is newer than the pause sources.
# Prints the tarball's path as its last line on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "${here}/../.." && pwd)
# shellcheck source=lib.sh
source "${here}/lib.sh"

out="${root}/bin/cluster/pause.tar"
if [[ -f "${out}" ]] && [[ -z "$(find "${root}/test/cmd/pause" "${here}/pause-image.sh" -newer "${out}" -print -quit)" ]]; then
  echo "${out}"
  exit 0
fi
mkdir -p "${root}/bin/cluster"
CGO_ENABLED=0 go build -C "${root}" -trimpath -ldflags "-s -w" -o "${root}/bin/cluster/pause" ./test/cmd/pause
go -C "${root}/hack/image" run . --binary "${root}/bin/cluster/pause" --path /pause --user 65535 --ca-certs none \
  --name "${PAUSE_IMAGE_NAME}" --label org.opencontainers.image.title=actionledger-test-pause \
  --out "${out}.tmp" >&2
mv "${out}.tmp" "${out}"
log "built ${out} (${PAUSE_IMAGE_NAME})"
echo "${out}"
