# Multi-stage build of the toolgate binary.
#   docker build -t toolgate .
#   docker run -p 8080:8080 -v toolgate-data:/data toolgate
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p toolgate-server \
 && cp target/release/toolgate /usr/local/bin/toolgate

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /data --uid 10001 toolgate \
 && mkdir -p /data && chown toolgate /data
COPY --from=build /usr/local/bin/toolgate /usr/local/bin/toolgate
USER toolgate
ENV TOOLGATE_DATA_DIR=/data
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["toolgate"]
# This version has no authentication and listens on loopback only; inside a container
# that means it is reachable through `docker exec` alone until tenancy lands.
CMD ["serve", "--listen", "127.0.0.1:8080"]
