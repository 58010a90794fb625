# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# rocm-6.4: ROCm 6.4.4 (2025-09-24), PyTorch 2.8.0, Python 3.12
# GPU targets: gfx90a gfx942 gfx1100 gfx1101 gfx1200 gfx1201
# Build (repository root; .dockerignore keeps the context to pyproject.toml, README.md, src/): docker build -f env/docker/rocm-6.4.Dockerfile -t rocmlab:rocm-6.4 .
# Run as yourself: docker run --rm -it --device /dev/kfd --device /dev/dri --ipc=host --shm-size 8g --security-opt seccomp=unconfined --group-add video --group-add render --user "$(id -u):$(id -g)" -v "$PWD:/rocmlab" rocmlab:rocm-6.4
# CI runs it through `rocmlab env job` (ci/freshness_job.sh).

FROM python:3.12-slim-bookworm
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/rocm6.4 "torch==2.8.0+rocm6.4"
ENV ROCMLAB_ENV=rocm-6.4 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/tmp/home
ENV ROCMLAB_CACHE=/rocmlab-cache HF_HOME=/rocmlab-cache/huggingface
RUN mkdir -p -m 1777 /tmp/home
WORKDIR /rocmlab
COPY pyproject.toml README.md /rocmlab/
COPY src /rocmlab/src
RUN pip install --no-cache-dir -e "/rocmlab[labs]"
CMD ["bash"]
