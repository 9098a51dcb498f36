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
 && apt-get install -y --no-install-recommends ca-certificates curl git \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /data --uid 10001 toolgate \
 && mkdir -p /data && chown toolgate /data
COPY --from=build /usr/local/bin/toolgate /usr/local/bin/toolgate
USER toolgate
ENV TOOLGATE_DATA_DIR=/data
VOLUME /data
EXPOSE 8080 9464
ENTRYPOINT ["toolgate"]
# Every request needs an API key or a JWT; the first start prints the admin key and
# writes it to /data/admin-api-key.
CMD ["serve", "--listen", "0.0.0.0:8080"]
