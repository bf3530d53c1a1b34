# Image URL to use all building/pushing image targets
IMG ?= controller:latest
# LOCALBIN is where tools and the built binaries go.
LOCALBIN ?= $(shell pwd)/bin
# YEAR defines the year value used for substituting the YEAR placeholder in the boilerplate header.
YEAR ?= $(shell date +%Y)

# Get the currently used golang install path (in GOPATH/bin, unless GOBIN is set)
ifeq (,$(shell go env GOBIN))
GOBIN=$(shell go env GOPATH)/bin
else
GOBIN=$(shell go env GOBIN)
endif

# CONTAINER_TOOL defines the container tool to be used for building images.
# Be aware that the target commands are only tested with Docker which is
# scaffolded by default. However, you might want to replace it to use other
# tools. (i.e. podman)
CONTAINER_TOOL ?= docker

# Setting SHELL to bash allows bash commands to be executed by recipes.
# Options are set to exit when a recipe line exits non-zero or a piped command fails.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

# The help target prints out all targets with their descriptions organized
# beneath their categories. The categories are represented by '##@' and the
# target descriptions by '##'. The awk command is responsible for reading the
# entire set of makefiles included in this invocation, looking for lines of the
# file as xyz: ## something, and then pretty-format the target and help. Then,
# if there's a line with ##@ something, that gets pretty-printed as a category.
# More info on the usage of ANSI control characters for terminal formatting:
# https://en.wikipedia.org/wiki/ANSI_escape_code#SGR_parameters
# More info on the awk command:
# http://linuxcommand.org/lc3_adv_awk.php

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate WebhookConfiguration, ClusterRole and CustomResourceDefinition objects.
	"$(CONTROLLER_GEN)" rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate code containing DeepCopy, DeepCopyInto, and DeepCopyObject method implementations.
	"$(CONTROLLER_GEN)" object:headerFile="hack/boilerplate.go.txt",year=$(YEAR) paths="./..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

# KUBEBUILDER_ASSETS points envtest at the control plane built from Go modules (hack/build-controlplane.sh).
KUBE_VERSION ?= v1.37.2
ASSETS_DIR ?= $(LOCALBIN)/k8s/$(patsubst v%,%,$(KUBE_VERSION))-$(shell go env GOOS)-$(shell go env GOARCH)
# GO_TEST_FLAGS are extra flags for go test, e.g. GO_TEST_FLAGS='-run TestX -v'.
GO_TEST_FLAGS ?=

.PHONY: test
test: manifests generate fmt vet lint controlplane kustomize helm kubebuilder ## Run golangci-lint (shape rules: funlen, gocognit), then unit, envtest integration and e2e tests (real kube-apiserver + etcd, real manager process).
	KUBEBUILDER_ASSETS="$(ASSETS_DIR)" go test ./... -count=1 -timeout 20m $(GO_TEST_FLAGS)
	cd hack/image && go test ./... -count=1

.PHONY: test-unit
test-unit: ## Run only the unit tests (no control plane): every package outside test/; in internal/controller the files tagged !unit, which need envtest, are left out.
	go test -tags unit $$(go list ./... | grep -v -e /test/) -count=1

.PHONY: controlplane
controlplane: ## Build etcd, kube-apiserver and kubectl from Go modules into bin/k8s (skipped when present).
	@hack/build-controlplane.sh >/dev/null

.PHONY: cluster-binaries
cluster-binaries: ## Build kubelet, kube-controller-manager, kube-scheduler and kube-proxy too (CLUSTER=1) into bin/k8s (skipped when present).
	@CLUSTER=1 hack/build-controlplane.sh >/dev/null

.PHONY: test-cluster
test-cluster: ## Run the real-cluster suites: test/cluster (a single-node cluster on 127.0.0.1, the image and the Helm chart installed as users do), then test/podnet (the chart's defaults on a cluster with a pod network, in a network namespace of its own) (root; containerd, runc, CNI plugins).
	@POD_NETWORK=1 hack/cluster/up.sh --check
	@$(MAKE) --no-print-directory cluster-binaries image helm
	go build -o bin/kubectl-actionledger ./cmd/kubectl-actionledger
	cd hack/image && go build -o ../../bin/registry ./registry
	ACTIONLEDGER_CLUSTER=1 KUBE_ASSETS="$(ASSETS_DIR)" ACTIONLEDGER_IMAGE_TAR="$(IMAGE_TAR)" ACTIONLEDGER_IMAGE="$(IMAGE_NAME)" \
		go test ./test/cluster/ ./test/podnet/ -p 1 -count=1 -v -timeout 30m $(GO_TEST_FLAGS)

# CLUSTER_DIR is the state dir of cluster-up/cluster-down (everything of that cluster lives in it).
CLUSTER_DIR ?= /tmp/actionledger-cluster

.PHONY: cluster-up
cluster-up: ## Start the single-node cluster in CLUSTER_DIR (POD_NETWORK=1: with a pod network and kube-proxy in a network namespace of its own); then export KUBECONFIG=$(CLUSTER_DIR)/admin.kubeconfig.
	@hack/cluster/up.sh --check
	@$(MAKE) --no-print-directory cluster-binaries
	KUBE_ASSETS="$(ASSETS_DIR)" hack/cluster/up.sh "$(CLUSTER_DIR)"

.PHONY: cluster-down
cluster-down: ## Stop the cluster of cluster-up and remove what it created.
	hack/cluster/down.sh "$(CLUSTER_DIR)"

.PHONY: verify
verify: manifests generate fmt ## Fail when generated files or formatting are stale.
	@git diff --exit-code -- api config internal cmd test || { echo "generated files are stale: run 'make manifests generate fmt' and commit"; exit 1; }

.PHONY: chaos
chaos: controlplane build ## Run the long chaos run (SIGKILLs, two managers, toxiproxy faults); see docs/chaos.md.
	KUBEBUILDER_ASSETS="$(ASSETS_DIR)" CHAOS_LONG=1 go test ./test/chaos/ -count=1 -timeout 60m -v -run TestChaos $(GO_TEST_FLAGS)

# BENCH_TIMEOUT bounds one make bench; the soak (BENCH_PARTS=soak, docs/scale.md) needs about 50 minutes at its defaults.
BENCH_TIMEOUT ?= 90m

.PHONY: bench
bench: controlplane ## Run the benchmark against the local control plane; see docs/benchmarks.md (BENCH_PARTS=soak: the soak, docs/scale.md).
	KUBEBUILDER_ASSETS="$(ASSETS_DIR)" BENCH_FULL=1 go test ./test/bench/ -count=1 -timeout $(BENCH_TIMEOUT) -v -run TestBenchmark $(GO_TEST_FLAGS)

.PHONY: lint
lint: golangci-lint ## Run golangci-lint linter
	"$(GOLANGCI_LINT)" run

.PHONY: lint-fix
lint-fix: golangci-lint ## Run golangci-lint linter and perform fixes
	"$(GOLANGCI_LINT)" run --fix

.PHONY: lint-config
lint-config: golangci-lint ## Verify golangci-lint linter configuration
	"$(GOLANGCI_LINT)" config verify

##@ Build

# GO_SOURCES are the inputs of manifests, generate, fmt and vet. build and run-local run those four only when one
# of them changed since the last successful run (the stamp bin/.generated), so a second 'make run-local' goes
# straight to the go build (incremental) and the start; 'make test' and 'make verify' still run them every time.
# The directories below them are listed too, so that adding or deleting a file (which changes its directory)
# counts as a change; not the top-level ones, since "test" is also the name of a target.
GO_SOURCES = $(shell find api cmd internal test -mindepth 1 \( -type d -o -name '*.go' -not -name 'zz_generated.*' \) 2>/dev/null) hack/boilerplate.go.txt

$(LOCALBIN)/.generated: $(GO_SOURCES) | $(LOCALBIN)
	$(MAKE) --no-print-directory manifests generate fmt vet
	@touch "$@"

.PHONY: build
build: $(LOCALBIN)/.generated ## Build the manager, the kubectl plugin and the demo destination into bin/ (generate, fmt and vet first when a Go file changed).
	go build -o bin/actionledger ./cmd
	go build -o bin/kubectl-actionledger ./cmd/kubectl-actionledger
	go build -o bin/demo-destination ./test/cmd/destination

.PHONY: run
run: manifests generate fmt vet ## Run a controller from your host against the current kubeconfig.
	go run ./cmd/main.go

.PHONY: run-local
run-local: controlplane build ## Start etcd + kube-apiserver, install the CRDs, run the manager and the demo destination; Ctrl-C stops all.
	hack/run-local.sh

# The image, built with Go only (no Docker): hack/image writes the static binary, /etc/passwd with uid 65532, /tmp and
# Mozilla's CA roots onto an empty base, no shell. The gateway is the same binary ("actionledger gateway"), so one
# image serves both. VERSION defaults to the chart's appVersion, so the chart's default tag names this image;
# SOURCE_DATE_EPOCH (the commit's time) is every timestamp in it: the same commit gives the same bytes.
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' dist/chart/Chart.yaml)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_NAME ?= localhost/actionledger:$(VERSION)
# IMAGE_FORMAT: oci (an OCI layout in a tar; ctr import and docker load keep its digest) or docker (docker save).
IMAGE_FORMAT ?= oci
IMAGE_DIR ?= $(LOCALBIN)/image
IMAGE_TAR ?= $(IMAGE_DIR)/actionledger-$(VERSION).tar
IMAGE_LDFLAGS = -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: image
image: ## Build the manager image (it runs the gateway too) with Go only into bin/image/actionledger-$(VERSION).tar; ctr -n k8s.io images import or docker load it.
	@mkdir -p "$(IMAGE_DIR)"
	CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags "$(IMAGE_LDFLAGS)" -o "$(IMAGE_DIR)/actionledger" ./cmd
	cd hack/image && go run . --binary "$(IMAGE_DIR)/actionledger" --path /manager --name "$(IMAGE_NAME)" \
		--format "$(IMAGE_FORMAT)" --epoch "$(SOURCE_DATE_EPOCH)" --arch "$$(go env GOARCH)" --out "$(IMAGE_TAR)" \
		--label org.opencontainers.image.title=actionledger \
		--label org.opencontainers.image.version=$(VERSION) \
		--label org.opencontainers.image.revision=$(COMMIT) \
		--label org.opencontainers.image.source=https://github.com/actionledger/actionledger \
		--label org.opencontainers.image.licenses=Apache-2.0

# release: the versioned chart package and the image with its digest in RELEASE_DIR (hack/release.sh); with
# REGISTRY=host[:port] both are pushed there (the image as REGISTRY/actionledger:$(VERSION), the chart to
# oci://REGISTRY/charts), and the packaged chart names the image by its digest.
RELEASE_DIR ?= $(LOCALBIN)/release
REGISTRY ?=

.PHONY: release
release: image helm ## Build the versioned chart package and the image with its digest into bin/release; REGISTRY=host:port pushes both.
	VERSION="$(VERSION)" IMAGE_TAR="$(IMAGE_TAR)" HELM="$(HELM)" RELEASE_DIR="$(RELEASE_DIR)" REGISTRY="$(REGISTRY)" hack/release.sh

# If you wish to build the manager image targeting other platforms you can use the --platform flag.
# (i.e. docker build --platform linux/arm64). However, you must enable docker buildKit for it.
# More info: https://docs.docker.com/develop/develop-images/build_enhancements/
# Override BASE_IMAGE to build from another registry, e.g.
# make docker-build IMG=<img> BASE_IMAGE=docker.io/library/golang:1.26
.PHONY: docker-build
docker-build: ## Build docker image with the manager.
	$(CONTAINER_TOOL) build $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t ${IMG} .

.PHONY: docker-push
docker-push: ## Push docker image with the manager.
	$(CONTAINER_TOOL) push ${IMG}

# PLATFORMS defines the target platforms for the manager image be built to provide support to multiple
# architectures. (i.e. make docker-buildx IMG=myregistry/mypoperator:0.0.1). To use this option you need to:
# - be able to use docker buildx. More info: https://docs.docker.com/build/buildx/
# - have enabled BuildKit. More info: https://docs.docker.com/develop/develop-images/build_enhancements/
# - be able to push the image to your registry (i.e. if you do not set a valid value via IMG=<myregistry/image:<tag>> then the export will fail)
# To adequately provide solutions that are compatible with multiple platforms, you should consider using this option.
PLATFORMS ?= linux/arm64,linux/amd64,linux/s390x,linux/ppc64le
.PHONY: docker-buildx
docker-buildx: ## Build and push docker image for the manager for cross-platform support
	# copy existing Dockerfile and insert --platform=${BUILDPLATFORM} into Dockerfile.cross, and preserve the original Dockerfile
	sed -e '1 s/\(^FROM\)/FROM --platform=\$$\{BUILDPLATFORM\}/; t' -e ' 1,// s//FROM --platform=\$$\{BUILDPLATFORM\}/' Dockerfile > Dockerfile.cross
	- $(CONTAINER_TOOL) buildx create --name actionledger-builder
	$(CONTAINER_TOOL) buildx use actionledger-builder
	- $(CONTAINER_TOOL) buildx build --push --platform=$(PLATFORMS) $(if $(BASE_IMAGE),--build-arg BASE_IMAGE=$(BASE_IMAGE)) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --tag ${IMG} -f Dockerfile.cross .
	- $(CONTAINER_TOOL) buildx rm actionledger-builder
	rm Dockerfile.cross

.PHONY: build-installer
build-installer: manifests generate kustomize ## Generate a consolidated YAML with CRDs and deployment.
	mkdir -p dist
	cd config/manager && "$(KUSTOMIZE)" edit set image controller=${IMG}
	"$(KUSTOMIZE)" build config/default > dist/install.yaml

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install CRDs into the K8s cluster specified in ~/.kube/config.
	@out="$$( "$(KUSTOMIZE)" build config/crd 2>/dev/null || true )"; \
	if [ -n "$$out" ]; then echo "$$out" | "$(KUBECTL)" apply -f -; else echo "No CRDs to install; skipping."; fi

.PHONY: uninstall
uninstall: manifests kustomize ## Uninstall CRDs from the K8s cluster specified in ~/.kube/config. Call with ignore-not-found=true to ignore resource not found errors during deletion.
	@out="$$( "$(KUSTOMIZE)" build config/crd 2>/dev/null || true )"; \
	if [ -n "$$out" ]; then echo "$$out" | "$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -f -; else echo "No CRDs to delete; skipping."; fi

.PHONY: deploy
deploy: manifests kustomize ## Deploy controller to the K8s cluster specified in ~/.kube/config.
	cd config/manager && "$(KUSTOMIZE)" edit set image controller=${IMG}
	"$(KUSTOMIZE)" build config/default | "$(KUBECTL)" apply -f -

.PHONY: undeploy
undeploy: kustomize ## Undeploy controller from the K8s cluster specified in ~/.kube/config. Call with ignore-not-found=true to ignore resource not found errors during deletion.
	"$(KUSTOMIZE)" build config/default | "$(KUBECTL)" delete --ignore-not-found=$(ignore-not-found) -f -

##@ Dependencies

## Location to install dependencies to: LOCALBIN, set at the top (rules above name it)
$(LOCALBIN):
	mkdir -p "$(LOCALBIN)"

## Tool Binaries
KUBECTL ?= $(ASSETS_DIR)/kubectl
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT = $(LOCALBIN)/golangci-lint
HELM ?= $(LOCALBIN)/helm

## Tool Versions
KUSTOMIZE_VERSION ?= v5.8.1
CONTROLLER_TOOLS_VERSION ?= v0.23.0

GOLANGCI_LINT_VERSION ?= v2.15.0
HELM_VERSION ?= v4.3.2
.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Download kustomize locally if necessary.
$(KUSTOMIZE): $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Download controller-gen locally if necessary.
$(CONTROLLER_GEN): $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Download golangci-lint locally if necessary.
$(GOLANGCI_LINT): $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

.PHONY: helm
helm: $(HELM) ## Download helm locally if necessary (built from the Go module proxy).
$(HELM): $(LOCALBIN)
	$(call go-install-tool,$(HELM),helm.sh/helm/$(firstword $(subst ., ,$(HELM_VERSION)))/cmd/helm,$(HELM_VERSION))

KUBEBUILDER ?= $(LOCALBIN)/kubebuilder
KUBEBUILDER_VERSION ?= v4.16.0
.PHONY: kubebuilder
kubebuilder: $(KUBEBUILDER) ## Download kubebuilder locally if necessary.
$(KUBEBUILDER): | $(LOCALBIN)
	$(call go-install-tool,$(KUBEBUILDER),sigs.k8s.io/kubebuilder/v4,$(KUBEBUILDER_VERSION))

# helm-chart regenerates dist/chart from the kustomize render of config/default with kubebuilder's helm/v2-alpha
# plugin, in a scratch directory (hack/helm-chart.sh says how and what is kept by hand).
# test/integration/ecosystem/helm_test.go fails on drift.
.PHONY: helm-chart
helm-chart: manifests kustomize kubebuilder ## Regenerate the Helm chart in dist/chart from config/ (kubebuilder helm/v2-alpha).
	KUSTOMIZE="$(KUSTOMIZE)" KUBEBUILDER="$(KUBEBUILDER)" hack/helm-chart.sh dist

# go-install-tool will 'go install' any package with custom target and name of binary, if it doesn't exist
# $1 - target path with name of binary
# $2 - package url which can be installed
# $3 - specific version of package
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(1)-$(3)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Downloading $${package}" ;\
rm -f "$(1)" ;\
GOBIN="$(LOCALBIN)" go install $${package} ;\
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)" ;\
} ;\
ln -sf "$$(realpath "$(1)-$(3)")" "$(1)"
endef

define gomodver
$(shell go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' $(1) 2>/dev/null)
endef
