# syntax=docker/dockerfile:1
# One image with both binaries: rotor-drainer (the Deployment) and rotor-selector (the CronJob).
# deploy/ runs each by its path in /usr/local/bin. For Docker users:
#   docker build -t ghcr.io/rotor-dev/rotor:0.1.0 .
# Our build machines have no Docker: tools/image.sh builds this same image with crane, from the
# same cargo command and the same files (tools/image-files.txt is this file's final stage, line
# for line), and the end-to-end tests run the binaries it packs on the image's own libraries
# (tests/tests/real_image.rs). tests/tests/image.rs fails when this file and the script differ.

FROM rust:1.95-bookworm AS build
# The CA certificates and time zones the final stage copies.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cargo.lock is used as committed (--locked). kube and the AWS SDK use rustls with ring, so no
# OpenSSL is linked or needed at run time. The target directory is a cache mount, so the binaries
# are copied out in the same step, with the empty /tmp of the final image (see below) and the
# binaries' SBOMs (tools/sbom.sh: CycloneDX JSON by cargo-cyclonedx, which it pins and builds
# into ~/.cache/rotor/tools, a cache mount too).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    --mount=type=cache,target=/root/.cache/rotor/tools \
    cargo build --release --locked -p rotor-drainer -p rotor-selector \
    && install -D -m 0755 target/release/rotor-drainer /out/rotor-drainer \
    && install -D -m 0755 target/release/rotor-selector /out/rotor-selector \
    && install -d -m 1777 /out/rootfs/tmp \
    && tools/sbom.sh /out/sbom rotor-drainer rotor-selector

# Nothing but what the binaries use: glibc and libgcc_s at the paths the build stage's `ldd`
# gives (Debian bookworm's, as on the machines tools/image.sh runs on), CA certificates, time
# zones, /etc/passwd and /etc/group with `nonroot` (uid/gid 65532), and an empty /tmp (mode 1777,
# copied inside /out/rootfs/ because COPY does not keep the mode of the directory it names); and
# the binaries' SBOMs in /usr/share/rotor/sbom/. No shell, no package manager. The same files as
# the distroless/cc base this image used to have, and the SBOMs.
FROM scratch
COPY --from=build /out/rotor-drainer /usr/local/bin/rotor-drainer
COPY --from=build /out/rotor-selector /usr/local/bin/rotor-selector
COPY --from=build /out/sbom/ /usr/share/rotor/sbom/
COPY --from=build /lib64/ld-linux-x86-64.so.2 /lib64/ld-linux-x86-64.so.2
COPY --from=build /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libc.so.6
COPY --from=build /lib/x86_64-linux-gnu/libm.so.6 /lib/x86_64-linux-gnu/libm.so.6
COPY --from=build /lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libgcc_s.so.1
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /usr/share/zoneinfo/ /usr/share/zoneinfo/
COPY --from=build /out/rootfs/ /
COPY tools/image/etc/passwd /etc/passwd
COPY tools/image/etc/group /etc/group
COPY tools/image/etc/nsswitch.conf /etc/nsswitch.conf
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.source="https://github.com/rotor-dev/rotor"
WORKDIR /
USER 65532:65532
CMD ["rotor-drainer", "--help"]
