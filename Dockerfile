# Build: docker build -t wfm .    Run: see docker-compose.yml (the server needs DATABASE_URL in a container).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/wfm ./cmd/wfm

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/wfm /usr/local/bin/wfm
ENV WFM_LISTEN=:8080 WFM_LOG_FORMAT=json
EXPOSE 8080
USER nonroot
ENTRYPOINT ["/usr/local/bin/wfm"]
