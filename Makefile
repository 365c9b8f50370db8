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
space     := $(empty) $(empty)
comma     := ,
LDFLAGS   := -X github.com/nodeforge/nodeforge/version.Version=$(VERSION) \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR)
CONTROLLER_GEN := $(BIN)/controller-gen
STATICCHECK    := $(BIN)/staticcheck

# One set of build settings for every Go build of a run: the shipped
# binaries and images (static, reproducible), the Kubernetes components the
# sandbox builds, and the test binaries. Go caches a compiled package per
# settings, so settings that differed (cgo on for tests, off for the
# binaries) compiled the whole Kubernetes tree two or three times.
export CGO_ENABLED := 0
export GOFLAGS    := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)

# Two test packages build and run at once; test/e2e is named first so it
# starts first, being the longest. Its tests each run their own sandbox (a
# whole control plane), -parallel of them at once: at 4 the 2-core CI
# machine is 78-96% busy through the test step (docs/benchmarks.md, CI).
TEST_FLAGS   ?= -p 2 -parallel 4 -count=1 -timeout 30m
# Wall-time budgets, reported (never enforced) by hack/testreport after
# the run: a test or package over its budget is named in the output.
TEST_BUDGETS ?= -test-budget 3m -package-budget ./test/e2e=12m
TESTREPORT   := $(BIN)/testreport
# The packages whose types hold locks (the plugin's book and claims, the
# simulator's cluster, the controllers' executor, ledgers and caches) run
# again under the race detector, which needs cgo. Their test binaries
# compile the Kubernetes tree with -race once (about 4 minutes on a cold
# 2-core machine, docs/benchmarks.md); warm, the run takes about 15s.
RACE_PKGS    ?= ./plugin/... ./simulator/... ./provisioner/controllers/... ./provisioner/limits/...

.PHONY: build
build: ## Build nodeforge-scheduler, nodeforge-provisioner, nodeforge-sandbox and nodeforge-convert into bin/ (static).
	@# One go build of the four links them in parallel; go names each after
	@# its directory, so they are built aside and renamed.
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/.build/ ./cmd/scheduler ./cmd/provisioner ./cmd/sandbox ./cmd/convert
	for p in scheduler provisioner sandbox convert; do mv -f $(BIN)/.build/$$p $(BIN)/nodeforge-$$p; done

# The images' architectures; each is cross-compiled (the host's shares
# make build's compiled packages). make images (and so make test) builds
# linux/amd64 only; make release-images builds every architecture the
# project ships: cross-compiling the Kubernetes tree for arm64 was about
# 4 of a cold CI run's minutes, for an image no test runs.
IMAGE_ARCHS ?= amd64
RELEASE_IMAGE_ARCHS := amd64 arm64

.PHONY: release-images
release-images: ## Build the OCI images for every architecture shipped (linux/amd64, linux/arm64) into bin/images, with their digests and SBOMs.
	$(MAKE) images IMAGE_ARCHS="$(RELEASE_IMAGE_ARCHS)"

.PHONY: images
images: ## Build the OCI images of nodeforge-scheduler and nodeforge-provisioner (linux/amd64; IMAGE_ARCHS to choose) into bin/images, without a container daemon.
	for arch in $(IMAGE_ARCHS); do \
	  GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/linux_$$arch/.build/ ./cmd/scheduler ./cmd/provisioner || exit 1; \
	  for p in scheduler provisioner; do mv -f $(BIN)/linux_$$arch/.build/$$p $(BIN)/linux_$$arch/nodeforge-$$p || exit 1; done; \
	done
	$(GO) run -C $(TOOLS_MOD)/images . --bins $(BIN) --out $(BIN)/images --version $(VERSION) \
	  --revision "$$(git rev-parse HEAD 2>/dev/null)" --archs "$(subst $(space),$(comma),$(IMAGE_ARCHS))" \
	  nodeforge-scheduler nodeforge-provisioner

.PHONY: components
components: build ## Build (or reuse from the cache) etcd, kube-apiserver, kube-controller-manager and kwok, and the oldest supported minor's kube-apiserver and kube-controller-manager (hack/tools/kube-oldest) that the tests also run.
	$(BIN)/nodeforge-sandbox build
	$(BIN)/nodeforge-sandbox build --kubernetes oldest

$(CONTROLLER_GEN): $(TOOLS_MOD)/go.mod $(TOOLS_MOD)/go.sum
	$(GO) build -C $(TOOLS_MOD) -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

$(STATICCHECK): $(TOOLS_MOD)/go.mod $(TOOLS_MOD)/go.sum
	$(GO) build -C $(TOOLS_MOD) -o $(STATICCHECK) honnef.co/go/tools/cmd/staticcheck

.PHONY: lint
lint: $(STATICCHECK) ## gofmt, go vet, staticcheck (checks in staticcheck.conf; the version pinned in hack/tools) and the import rules (hack/importrules).
	@unformatted=$$(gofmt -l $$(find . -name '*.go' -not -path './bin/*' -not -path './.git/*')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt: not formatted (run gofmt -w on them):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(GO) run ./hack/importrules

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code and the CRDs in manifests/crd and manifests/crd-optional.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./apis/...
	$(CONTROLLER_GEN) crd paths=./apis/v1alpha1/... output:crd:artifacts:config=manifests/crd
	$(CONTROLLER_GEN) crd paths=./apis/autoscaling/... output:crd:artifacts:config=manifests/crd-optional

.PHONY: test
test: lint components images $(CONTROLLER_GEN) ## Lint, then run unit, integration and end-to-end tests against the binaries and images in bin/.
	$(GO) build -o $(TESTREPORT) ./hack/testreport
	{ status=0; \
	  NODEFORGE_BIN_DIR=$(BIN) CONTROLLER_GEN=$(CONTROLLER_GEN) $(GO) test -json $(TEST_FLAGS) ./test/e2e ./... || status=1; \
	  CGO_ENABLED=1 $(GO) test -json -race -count=1 $(RACE_PKGS) || status=1; \
	  NODEFORGE_IMAGES=$(BIN)/images NODEFORGE_IMAGE_ARCHS="$(subst $(space),$(comma),$(IMAGE_ARCHS))" $(GO) test -C $(TOOLS_MOD)/images -json -count=1 ./... || status=1; \
	  exit $$status; } | $(TESTREPORT) $(TEST_BUDGETS)

.PHONY: race
race: ## Run the packages that hold locks under the race detector (part of make test).
	CGO_ENABLED=1 $(GO) test -race -count=1 $(RACE_PKGS)

.PHONY: bench
bench: ## Run the benchmarks (figures go in docs/benchmarks.md).
	$(GO) test -run '^$$' -bench . -benchtime 3x ./plugin/... ./provisioner/... ./nodeshape/... ./simulator/...

.PHONY: demo
demo: build ## Start the sandbox and run the walk-through (it builds the components it runs on first use, not the oldest minor's, which only the tests need). NODEFORGE_FEATURE_GATES=GenericWorkload=true,... turns feature gates on in every component.
	$(BIN)/nodeforge-sandbox demo

.PHONY: clean
clean:
	rm -rf $(BIN)
