# syntax=docker/dockerfile:1

# The dblock CLI (migrate, exec, status, release, reaper) in a small image.
#
#   docker build -t dblock .
#   docker run --rm -e DBLOCK_DSN=postgres://... dblock reaper --metrics-addr :9090
#
# On SIGTERM the reaper finishes its batch within 30 s: stop it with a longer grace than
# docker's default 10 s (docker stop -t 45, stop_grace_period: 45s in compose).

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so code changes don't download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /dblock ./cmd/dblock

# distroless/static rather than alpine: the binary is static (the SQLite driver is pure Go),
# and an image with no shell, package manager or wget has the least to patch and exploit.
# The cost is no in-container healthcheck command; probe the reaper's /healthz from outside
# (an orchestrator's HTTP probe, or `curl localhost:9090/healthz` on the host).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /dblock /dblock
# The default DSN is the SQLite file ./dblock.db; nonroot can write to its home directory.
WORKDIR /home/nonroot
USER nonroot:nonroot
EXPOSE 9090
ENTRYPOINT ["/dblock"]
