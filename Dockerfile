# mrtr-gateway container image (see docs/deploy.md).
#
#   docker build -t mrtr-gateway .
#   docker run --rm mrtr-gateway --help
#
# Stage 1 builds the binary from the workspace; stage 2 is a distroless runtime (glibc, CA
# certificates for https:// backends, no shell, no package manager) running as a non-root user.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p mrtr-gateway \
 && install -D -m 0755 target/release/mrtr-gateway /out/mrtr-gateway

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/mrtr-gateway /usr/local/bin/mrtr-gateway
# 65532 is distroless's "nonroot" user; Kubernetes can check runAsNonRoot against the number.
USER 65532:65532
# The smoke check: the binary starts, links, and documents itself in the runtime image.
RUN ["/usr/local/bin/mrtr-gateway", "--help"]
# 8080: MCP (/mcp); 9090: admin (/metrics, /healthz, /readyz).
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/mrtr-gateway"]
CMD ["--config", "/etc/mrtr/config/gateway.toml"]
