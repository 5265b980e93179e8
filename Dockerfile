FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY adapters ./adapters
COPY policies ./policies
COPY backends ./backends
RUN pip install --no-cache-dir . && useradd --system --create-home countersign \
    && mkdir /data && chown countersign /data

USER countersign
ENV COUNTERSIGN_HOST=0.0.0.0 \
    COUNTERSIGN_PORT=8765 \
    COUNTERSIGN_DATA_DIR=/data
EXPOSE 8765
# COUNTERSIGN_REDIS_URL must name the Redis to use; --config FILE names adapters and orgs.
CMD ["countersign", "serve"]
