#!/usr/bin/env bash
# destination-image.sh builds the image of the test destination (test/cmd/destination, static: the recording HTTP
# server of `make run-local`, GET /_summary its counts) with the image tool of hack/image into
# bin/cluster/destination.tar (an OCI layout tarball, for ctr images import), named
# localhost/actionledger/destination:1.0: the destination test/podnet runs as a Deployment behind a Service on the
# pod network. Cached: skipped when the tarball is newer than its sources. Prints the tarball's path as its last
# line on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "${here}/../.." && pwd)
# shellcheck source=lib.sh
source "${here}/lib.sh"

name=localhost/actionledger/destination:1.0
out="${root}/bin/cluster/destination.tar"
if [[ -f "${out}" ]] && [[ -z "$(find "${root}/test/cmd/destination" "${root}/test/destination" "${here}/destination-image.sh" -newer "${out}" -print -quit)" ]]; then
  echo "${out}"
  exit 0
fi
mkdir -p "${root}/bin/cluster"
CGO_ENABLED=0 go build -C "${root}" -trimpath -ldflags "-s -w" -o "${root}/bin/cluster/destination" ./test/cmd/destination
go -C "${root}/hack/image" run . --binary "${root}/bin/cluster/destination" --path /destination --ca-certs none \
  --name "${name}" --label org.opencontainers.image.title=actionledger-test-destination \
  --out "${out}.tmp" >&2
mv "${out}.tmp" "${out}"
log "built ${out} (${name})"
echo "${out}"
