# The Sluice image: one static binary (every service is a subcommand) on an
# empty base, running as a non-root user. `make images` builds the same image
# without Docker (docs/deploy.md); or build it with any OCI builder, e.g.
#   docker build -t <your registry>/sluice:0.1.0 .
# and give the name to the Helm chart (image.repository, image.tag).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/sluice \
 && printf 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >/out/passwd \
 && printf 'nonroot:x:65532:\n' >/out/group

# Nothing but the binary, the CA certificates (NATS over TLS, the API
# server) and a user entry for the non-root user.
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/passwd /etc/passwd
COPY --from=build /out/group /etc/group
COPY --from=build /out/sluice /sluice
USER 65532:65532
ENTRYPOINT ["/sluice"]
