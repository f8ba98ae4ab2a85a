# syntax=docker/dockerfile:1
# ome-scheduler image, built from the repository root:
#   docker build -t registry.example.com/ome/ome-scheduler:v1.3.0 .
#   docker push registry.example.com/ome/ome-scheduler:v1.3.0
# Stage 1 builds the wheel and installs it into a virtualenv without pip. The final stage holds
# only the Python runtime and that virtualenv (no build tools, pip or caches) and runs as the
# numeric non-root user 65532, so it fits the chart's runAsNonRoot and readOnlyRootFilesystem:
# the scheduler writes nothing to disk (its serving certificate lives in memory, logs go to
# stderr). The chart runs command ["/ome-scheduler"] with kube-scheduler's flags.
# PYTHON_IMAGE is a Python 3.11 image with pip (by default Docker Hub's slim one); e2e/test_image.py
# builds this file with buildah on a Debian bookworm base made by mmdebstrap and runs the image
# (python -m e2e.image build builds it the same way).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN pip install build==1.2.2
COPY pyproject.toml README.md ./
COPY ome_scheduler ./ome_scheduler
RUN python -m build --wheel --outdir /dist . \
 && python -m venv --without-pip /opt/ome-scheduler \
 && pip --python /opt/ome-scheduler/bin/python install /dist/*.whl \
 && /opt/ome-scheduler/bin/python -m compileall -q /opt/ome-scheduler/lib

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="ome-scheduler" \
      org.opencontainers.image.description="Kubernetes 1.35 second scheduler: each gang of pods in one accelerator domain, bound all or nothing" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/ome-scheduler/bin:$PATH
# The runtime needs no pip: drop the base image's installer tooling, and the pip and setuptools
# wheels that ensurepip keeps in the standard library (python:3.11-slim has them).
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel \
 && python -c 'import importlib.util as u, pathlib, shutil; s = u.find_spec("ensurepip"); \
s and shutil.rmtree(pathlib.Path(s.origin).parent / "_bundled", ignore_errors=True)' \
 && rm -rf /root/.cache
COPY --from=build /opt/ome-scheduler /opt/ome-scheduler
# The user gets a passwd entry so that every runtime can give it a HOME (crun leaves HOME unset
# for a user missing from /etc/passwd, and the API client's kubeconfig lookup then fails with
# "Could not determine home directory." before it reaches the in-cluster credentials).
RUN ln -s /opt/ome-scheduler/bin/ome-scheduler /ome-scheduler \
 && echo 'ome-scheduler:x:65532:65532:ome-scheduler:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'ome-scheduler:x:65532:' >> /etc/group \
 && /ome-scheduler --help > /dev/null
USER 65532:65532
ENTRYPOINT ["/ome-scheduler"]
