# syntax=docker/dockerfile:1
# One image with both binaries: rotor-drainer (the Deployment) and rotor-selector (the CronJob).
# deploy/ runs each by its path in /usr/local/bin. Not built on our build machines (no Docker there):
#   docker build -t ghcr.io/rotor-dev/rotor:0.1.0 .

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# Cargo.lock is used as committed (--locked). kube and the AWS SDK use rustls with ring, so no
# OpenSSL is linked or needed at run time. The target directory is a cache mount, so the binaries
# are copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p rotor-drainer -p rotor-selector \
    && install -D -m 0755 target/release/rotor-drainer /out/rotor-drainer \
    && install -D -m 0755 target/release/rotor-selector /out/rotor-selector

# glibc, libgcc and CA certificates, no shell or package manager; `nonroot` is uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/rotor-drainer /out/rotor-selector /usr/local/bin/
USER 65532:65532
CMD ["rotor-drainer", "--help"]
