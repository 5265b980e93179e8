FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY adapters ./adapters
COPY policies ./policies
COPY backends ./backends
# `countersign agent` (the reference agent and its evaluation) is part of the CLI the image offers.
COPY countersign_agent ./countersign_agent
# A fixed numeric UID, so an orchestrator can check runAsNonRoot (deploy/kubernetes/ runs it as 10001).
# PyICU (subjects compared by their UTS #39 skeleton, gateway.principal) builds against the system ICU; the
# compiler goes once it has, ICU's library stays.
RUN apt-get update && apt-get install -y --no-install-recommends libicu-dev pkg-config g++ \
    && pip install --no-cache-dir . \
    && apt-get purge -y g++ && apt-get autoremove -y && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --create-home countersign \
    && mkdir /data && chown countersign /data

USER 10001
# Production: no demo backend, no demo key, the audit secret required (`serve --demo` for the demo).
# Bound beyond loopback, serve also needs COUNTERSIGN_ALLOWED_HOSTS and COUNTERSIGN_ALLOWED_ORIGINS
# (or [gateway] allowed_hosts and allowed_origins); COUNTERSIGN_CONFIG names the adapters and orgs,
# COUNTERSIGN_REDIS_URL the Redis (without it, the embedded server keeps its data in /data).
ENV COUNTERSIGN_MODE=production \
    COUNTERSIGN_HOST=0.0.0.0 \
    COUNTERSIGN_PORT=8765 \
    COUNTERSIGN_DATA_DIR=/data
VOLUME /data
EXPOSE 8765
# Liveness: the process answers HTTP. Readiness (/readyz: Redis, ledger durability, audit, backends,
# worker) is for the load balancer or orchestrator, which should stop routing rather than restart.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=2)"]
CMD ["countersign", "serve"]
