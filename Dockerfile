# syntax=docker/dockerfile:1
# The apigw image: the product alone (no `dev` feature: no demo server, no dev PKI), built with
# the `dist` profile (fat LTO, see Cargo.toml) in the Rust image, run as non-root on distroless.
#   docker build -t REGISTRY/apigw:0.1.0 .
#   docker push REGISTRY/apigw:0.1.0      # then: helm install ... --set image.repository=REGISTRY/apigw
# The runtime image has glibc, libgcc and CA certificates (the system roots the gateway trusts for
# APIServices without a caBundle) and nothing else: no shell, no package manager.

ARG RUST_VERSION=1.95
FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
# Cache mounts keep the registry and the target dir between builds; the binary is copied out
# because a cache mount is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --no-default-features --bin apigw \
 && install -D -m 0755 target/dist/apigw /out/apigw

# Debian 12 like the builder, so the glibc the binary links against is there.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/apigw /usr/local/bin/apigw
# distroless' nonroot user; the chart also sets runAsUser/runAsGroup 65532 and runAsNonRoot.
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/apigw"]
CMD ["serve", "--config", "/etc/apigw/config/config.yaml"]
