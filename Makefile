# Nodeforge. `make demo` runs the sandbox demo; `make test` runs every test.
# Both build what they need; nothing is downloaded but Go modules.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

BIN       ?= $(CURDIR)/bin
GO        ?= go
TOOLS_MOD := hack/tools
# The version stamped into the programs (--version).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# and the Kubernetes version the scheduler is built from, as Kubernetes'
# own build stamps it (kube-scheduler --version, build_info metrics).
KUBE_VERSION := $(shell $(GO) list -m -f '{{.Version}}' k8s.io/kubernetes 2>/dev/null)
KUBE_MINOR   := $(word 2,$(subst ., ,$(KUBE_VERSION)))
STATIC    := CGO_ENABLED=0
space     := $(empty) $(empty)
comma     := ,
LDFLAGS   := -X github.com/nodeforge/nodeforge/version.Version=$(VERSION) \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR)
CONTROLLER_GEN := $(BIN)/controller-gen

# Test packages run one at a time: each integration package starts its own
# control plane, and the CI machine has two cores.
TEST_FLAGS ?= -p 1 -count=1 -timeout 45m

.PHONY: build
build: ## Build nodeforge-scheduler, nodeforge-provisioner, nodeforge-sandbox and nodeforge-convert into bin/ (static).
	$(STATIC) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-scheduler ./cmd/scheduler
	$(STATIC) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-provisioner ./cmd/provisioner
	$(STATIC) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-sandbox ./cmd/sandbox
	$(STATIC) $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-convert ./cmd/convert

# The images' architectures; each is cross-compiled (the host's shares
# make build's compiled packages).
IMAGE_ARCHS ?= amd64 arm64

.PHONY: images
images: ## Build the OCI images of nodeforge-scheduler and nodeforge-provisioner (linux/amd64, linux/arm64) into bin/images, without a container daemon.
	for arch in $(IMAGE_ARCHS); do \
	  for p in scheduler provisioner; do \
	    $(STATIC) GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/linux_$$arch/nodeforge-$$p ./cmd/$$p || exit 1; \
	  done; \
	done
	$(GO) run -C $(TOOLS_MOD)/images . --bins $(BIN) --out $(BIN)/images --version $(VERSION) \
	  --revision "$$(git rev-parse HEAD 2>/dev/null)" --archs "$(subst $(space),$(comma),$(IMAGE_ARCHS))" \
	  nodeforge-scheduler nodeforge-provisioner

.PHONY: components
components: build ## Build (or reuse from the cache) etcd, kube-apiserver, kube-controller-manager and kwok.
	$(BIN)/nodeforge-sandbox build

$(CONTROLLER_GEN): $(TOOLS_MOD)/go.mod $(TOOLS_MOD)/go.sum
	$(GO) build -C $(TOOLS_MOD) -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code and the CRDs in manifests/crds.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./provisioner/apis/...
	$(CONTROLLER_GEN) crd paths=./provisioner/apis/... output:crd:artifacts:config=manifests/crds

.PHONY: test
test: components images $(CONTROLLER_GEN) ## Run unit, integration and end-to-end tests against the binaries and images in bin/.
	NODEFORGE_BIN_DIR=$(BIN) CONTROLLER_GEN=$(CONTROLLER_GEN) $(GO) test $(TEST_FLAGS) ./...
	NODEFORGE_IMAGES=$(BIN)/images $(GO) test -C $(TOOLS_MOD)/images -count=1 ./...

.PHONY: bench
bench: ## Run the benchmarks (figures go in docs/benchmarks.md).
	$(GO) test -run '^$$' -bench . -benchtime 3x ./plugin/... ./provisioner/...

.PHONY: demo
demo: components ## Start the sandbox and run the walk-through.
	$(BIN)/nodeforge-sandbox demo

.PHONY: clean
clean:
	rm -rf $(BIN)
