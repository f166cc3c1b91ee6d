# kafka-timers: one image for both process types (the command picks one).
#   make image      # docker build -t kafka-timers:<pyproject.toml's version> .
#   docker run kafka-timers oscillator --oscillator-id osc-1
#   docker run -v kt-w1:/data -p 6066:6066 kafka-timers worker --worker-id w-1
# Two stages: wheels are built where a compiler could be used, and only the installed
# result (no build tools, no source tree) goes into the runtime image.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
COPY oscillator ./oscillator
COPY spark_audit ./spark_audit
COPY clients/python ./clients/python
# Both in one run: the service depends on kafka-timers-client, which pip takes from
# ./clients/python here (it is not on PyPI).
RUN pip wheel --no-cache-dir --wheel-dir /wheels ./clients/python .

FROM python:3.11-slim
ARG VERSION=unknown
LABEL org.opencontainers.image.title="kafka-timers" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed non-root user; /data is its RocksDB directory, a volume per worker.
RUN useradd --create-home --uid 10001 kafka-timers \
    && mkdir /data \
    && chown kafka-timers /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER kafka-timers
WORKDIR /home/kafka-timers
# Logs straight to the container log; RocksDB under the volume; /metrics on 9100.
ENV PYTHONUNBUFFERED=1 \
    KAFKA_TIMERS_DATA_DIR=/data \
    KAFKA_TIMERS_WEB_PORT=6066 \
    METRICS_PORT=9100
VOLUME ["/data"]
# 6066: worker status page and JSON endpoints; 9100: Prometheus /metrics.
EXPOSE 6066 9100
# SIGTERM lets a worker finish in-flight work and leave its group (see docs/operations.md).
STOPSIGNAL SIGTERM
ENTRYPOINT ["kafka-timers"]
CMD ["worker"]
