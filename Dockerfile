# Images of nodeforge-scheduler and nodeforge-provisioner, for those who
# build with docker (make images builds the same images, for linux/amd64
# and linux/arm64, without a container daemon):
#
#   docker buildx build --platform linux/amd64,linux/arm64 --target scheduler \
#     --build-arg VERSION=v0.1.0 -t REGISTRY/nodeforge-scheduler:v0.1.0 .
#   (and --target provisioner)
#
# Static binaries on an empty base: the CA bundle for the cloud APIs, a
# non-root user (65532), the binary as the entrypoint. Not built in this
# project's CI, which has no container daemon; make images is.
ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS TARGETARCH
ARG VERSION=dev
ARG KUBE_VERSION=v1.37.2
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN for p in scheduler provisioner; do \
      CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath \
        -ldflags "-s -w -X github.com/nodeforge/nodeforge/version.Version=${VERSION} -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION}" \
        -o /out/nodeforge-$p ./cmd/$p || exit 1; \
    done && \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > /out/passwd

FROM scratch AS base
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/passwd /etc/passwd
USER 65532:65532
LABEL org.opencontainers.image.source="https://github.com/nodeforge/nodeforge"

FROM base AS scheduler
COPY --from=build /out/nodeforge-scheduler /nodeforge-scheduler
LABEL org.opencontainers.image.title="nodeforge-scheduler"
ENTRYPOINT ["/nodeforge-scheduler"]

FROM base AS provisioner
COPY --from=build /out/nodeforge-provisioner /nodeforge-provisioner
LABEL org.opencontainers.image.title="nodeforge-provisioner"
ENTRYPOINT ["/nodeforge-provisioner"]
