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
LDFLAGS   := -X github.com/nodeforge/nodeforge/version.Version=$(VERSION) \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR)
CONTROLLER_GEN := $(BIN)/controller-gen

# Test packages run one at a time: each integration package starts its own
# control plane, and the CI machine has two cores.
TEST_FLAGS ?= -p 1 -count=1 -timeout 45m

.PHONY: build
build: ## Build nodeforge-scheduler, nodeforge-provisioner, nodeforge-sandbox and nodeforge-convert into bin/.
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-scheduler ./cmd/scheduler
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-provisioner ./cmd/provisioner
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-sandbox ./cmd/sandbox
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/nodeforge-convert ./cmd/convert

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
test: components $(CONTROLLER_GEN) ## Run unit, integration and end-to-end tests against the binaries in bin/.
	NODEFORGE_BIN_DIR=$(BIN) CONTROLLER_GEN=$(CONTROLLER_GEN) $(GO) test $(TEST_FLAGS) ./...

.PHONY: bench
bench: ## Run the benchmarks (figures go in docs/benchmarks.md).
	$(GO) test -run '^$$' -bench . -benchtime 3x ./plugin/... ./provisioner/...

.PHONY: demo
demo: components ## Start the sandbox and run the walk-through.
	$(BIN)/nodeforge-sandbox demo

.PHONY: clean
clean:
	rm -rf $(BIN)
