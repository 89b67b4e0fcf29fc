# The planner as an internal service: one process, one DuckDB file on a volume, a non-root user.
#   docker build -t llm-capacity-planner .
#   docker run -p 8501:8501 -v planner-data:/data llm-capacity-planner
# See docs/DEPLOY.md for the reverse proxy, sign-in and backups.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PLANNER_DB=/data/planner.duckdb \
    NUMBA_CACHE_DIR=/tmp/numba-cache

WORKDIR /app
COPY requirements.txt .
# the service needs no test tools, nor Spark (summaries are made where the logs are): drop them from the same list
RUN grep -viE '^(pytest|hypothesis|pytest-playwright|playwright|oidc-provider-mock|pyspark)\b' requirements.txt > /tmp/runtime.txt \
    && pip install -r /tmp/runtime.txt \
    && useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin planner \
    && mkdir -p /data && chown planner:planner /data

COPY app.py ./
COPY planner ./planner
COPY pages ./pages
COPY traces ./traces
COPY .streamlit/config.toml ./.streamlit/config.toml

USER planner
VOLUME ["/data"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=90s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read() != b'ok')"]
# checks the deployment (sign-in settings, the store's volume), then becomes the Streamlit server
ENTRYPOINT ["python", "-m", "planner", "serve", "--port=8501", "--address=0.0.0.0"]
