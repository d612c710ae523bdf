# Ferry gateway / Celery worker image (docker-compose.yml runs gateway, worker, beat and migrate from it).
#   docker build -t ferry:local .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Only what the package needs: a change to tests or docs does not rebuild the layer below.
COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
COPY migrations ./migrations
RUN pip install . \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home ferry \
    && mkdir -p /data \
    && chown ferry:ferry /data

USER ferry
WORKDIR /data
ENV FERRY_HOST=0.0.0.0 \
    FERRY_PORT=9000 \
    FERRY_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 9000

HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FERRY_PORT', '9000'), timeout=4)"]

CMD ["ferry", "serve", "--workers", "2"]
