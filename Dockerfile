# syntax=docker/dockerfile:1
# ome-scheduler image: the wheel is built in the first stage; the final stage holds only the
# Python runtime, the installed packages and a non-root user (65532), so it runs under the
# chart's runAsNonRoot and readOnlyRootFilesystem. Build from the repository root:
#   docker build -t registry.example.com/ome/ome-scheduler:v1.3.0 .
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
RUN pip install --no-cache-dir build==1.2.2
COPY pyproject.toml README.md ./
COPY ome_scheduler ./ome_scheduler
RUN python -m build --wheel --outdir /dist \
 && python -m venv /opt/ome-scheduler \
 && /opt/ome-scheduler/bin/pip install --no-cache-dir /dist/*.whl \
 && find /opt/ome-scheduler -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/ome-scheduler/bin/python -m compileall -q /opt/ome-scheduler

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="ome-scheduler" \
      org.opencontainers.image.description="Kubernetes 1.35 second scheduler: each gang of pods in one accelerator domain, bound all or nothing" \
      org.opencontainers.image.source="https://github.com/moirai-internal/ome-scheduler" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/ome-scheduler/bin:$PATH
COPY --from=build /opt/ome-scheduler /opt/ome-scheduler
# The chart runs command ["/ome-scheduler"]; keep that path.
RUN ln -s /opt/ome-scheduler/bin/ome-scheduler /ome-scheduler \
 && rm -rf /root/.cache /var/lib/apt/lists/*
USER 65532:65532
ENTRYPOINT ["/ome-scheduler"]
