# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# canary-therock-nightly: canary: torch[device-{gfx}], transformers, peft, accelerate, tokenizers (pre-releases of torch), Python 3.12
# GPU targets: gfx950 gfx942 gfx90a gfx1201 gfx1200 gfx1151 gfx1100
# Build (repository root; .dockerignore keeps the context to pyproject.toml, README.md, src/): docker build -f env/docker/canary-therock-nightly.Dockerfile --build-arg GFX=gfx942 -t rocmlab:canary-therock-nightly .
# Run as yourself: docker run --rm -it --device /dev/kfd --device /dev/dri --ipc=host --shm-size 8g --security-opt seccomp=unconfined --group-add video --group-add render --user "$(id -u):$(id -g)" -v "$PWD:/rocmlab" rocmlab:canary-therock-nightly
# CI runs it through `rocmlab env job` (ci/freshness_job.sh).

FROM python:3.12-slim-bookworm
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*
ARG GFX=gfx942
RUN pip install --no-cache-dir --pre --index-url https://nightly.repo.amd.com/rocm/whl-next/ "torch[device-${GFX}]"
RUN pip install --no-cache-dir "transformers" "peft" "accelerate" "tokenizers"
ENV ROCMLAB_ENV=canary-therock-nightly PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/tmp/home
ENV ROCMLAB_CACHE=/rocmlab-cache HF_HOME=/rocmlab-cache/huggingface
RUN mkdir -p -m 1777 /tmp/home
WORKDIR /rocmlab
COPY pyproject.toml README.md /rocmlab/
COPY src /rocmlab/src
RUN pip install --no-cache-dir -e "/rocmlab[labs]"
CMD ["bash"]
