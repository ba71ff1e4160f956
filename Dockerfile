# Two images from one build (docker-compose.yml uses both):
#   docker build -t wfm .                                  the server (the default, last stage)
#   docker build --target wfm-devicesim -t wfm-devicesim .  the device simulator
# Both are distroless (no shell): read files of the data volume with
# `wfm print-admin-token` or `docker compose cp` (README, "Containers").
FROM golang:1.26-bookworm AS build
WORKDIR /src
# sdk/ is a module of its own that go.mod replaces with the tree's copy:
# its go.mod is needed to resolve the graph.
COPY go.mod go.sum ./
COPY sdk/go.mod sdk/go.sum ./sdk/
RUN go mod download
COPY . .
# The build context has no .git: the version and revision `wfm version`, /healthz and wfm_build_info
# show are given as build arguments (docker build --build-arg WFM_VERSION=1.4.0 --build-arg
# WFM_REVISION=$(git rev-parse HEAD) .); empty: unknown.
ARG WFM_VERSION= WFM_REVISION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/wfm-dev/wfm/internal/buildinfo.version=${WFM_VERSION} -X github.com/wfm-dev/wfm/internal/buildinfo.revision=${WFM_REVISION}" -o /out/wfm ./cmd/wfm \
 && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/wfm-devicesim ./cmd/wfm-devicesim \
 && mkdir -p /out/data /out/devicesim-pki

FROM gcr.io/distroless/static-debian12:nonroot AS wfm-devicesim
COPY --from=build /out/wfm-devicesim /usr/local/bin/wfm-devicesim
USER nonroot
ENTRYPOINT ["/usr/local/bin/wfm-devicesim"]

FROM gcr.io/distroless/static-debian12:nonroot AS wfm
COPY --from=build /out/wfm /usr/local/bin/wfm
# The data folder (development CA, admin token, webhook key): a volume, owned
# by the image's user so that a fresh named volume is writable.
COPY --from=build --chown=65532:65532 /out/data /data
# Where the compose file's pki job writes the simulator's certificate (a
# volume of its own, writable by the image's user when fresh).
COPY --from=build --chown=65532:65532 /out/devicesim-pki /devicesim-pki
ENV WFM_LISTEN=:8080 WFM_DEVICE_LISTEN=:8443 WFM_DATA_DIR=/data WFM_LOG_FORMAT=json
EXPOSE 8080 8443
VOLUME /data
USER nonroot
ENTRYPOINT ["/usr/local/bin/wfm"]
