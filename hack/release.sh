#!/usr/bin/env bash
# release.sh (make release) makes the versioned release of actionledger in RELEASE_DIR (default bin/release):
#   - the image (make image's tarball) and its manifest digest: image.txt holds <repository>:<VERSION>@<digest>;
#   - the chart packaged as actionledger-<VERSION>.tgz (chart version and appVersion VERSION), whose values name the
#     image by that digest (manager.image.repository, manager.image.digest), so the kubelet pulls exactly it.
# With REGISTRY (host[:port][/path]) the image is pushed as REGISTRY/actionledger:<VERSION> and the chart to
# oci://REGISTRY/charts (helm push), plain HTTP for a registry on a loopback address; install it with
#   helm install actionledger oci://REGISTRY/charts/actionledger --version <VERSION> -n actionledger-system --create-namespace
# Without REGISTRY the chart names IMAGE_REPOSITORY (default localhost/actionledger), nothing is pushed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
: "${VERSION:?VERSION is required}" "${IMAGE_TAR:?IMAGE_TAR is required}"
HELM=${HELM:-${root}/bin/helm}
out=${RELEASE_DIR:-${root}/bin/release}
mkdir -p "${out}"
push=(go run ./push --tar "${IMAGE_TAR}")
if [[ -n "${REGISTRY:-}" ]]; then
  repo="${REGISTRY}/actionledger"
  push+=(--ref "${repo}:${VERSION}")
else
  repo=${IMAGE_REPOSITORY:-localhost/actionledger}
fi
digest=$(cd "${root}/hack/image" && "${push[@]}")
[[ "${digest}" == sha256:* ]] || { echo "release.sh: no digest from hack/image/push: ${digest}" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT
cp -R "${root}/dist/chart" "${tmp}/actionledger"
values="${tmp}/actionledger/values.yaml"
n=$(grep -cx '    repository: localhost/actionledger' "${values}" || true)
[[ "${n}" == 1 ]] || { echo "release.sh: values.yaml: want one line '    repository: localhost/actionledger', found ${n}" >&2; exit 1; }
REPO="${repo}" DIGEST="${digest}" awk '$0 == "    repository: localhost/actionledger" {
  print "    repository: " ENVIRON["REPO"]; print "    digest: \"" ENVIRON["DIGEST"] "\""; next } { print }' "${values}" >"${values}.tmp"
mv "${values}.tmp" "${values}"
"${HELM}" package "${tmp}/actionledger" --version "${VERSION}" --app-version "${VERSION}" -d "${out}" >/dev/null
chart="${out}/actionledger-${VERSION}.tgz"
echo "${repo}:${VERSION}@${digest}" >"${out}/image.txt"
echo "image ${repo}:${VERSION}@${digest}"
echo "chart ${chart}"
if [[ -n "${REGISTRY:-}" ]]; then
  host=${REGISTRY%%/*}
  plain=()
  case "${host%%:*}" in 127.*|localhost|\[::1\]) plain=(--plain-http) ;; esac
  "${HELM}" push "${chart}" "oci://${REGISTRY}/charts" "${plain[@]}"
  echo "pushed oci://${REGISTRY}/charts/actionledger:${VERSION} and ${repo}:${VERSION}"
fi
