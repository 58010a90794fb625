# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# rocm-7.14: ROCm 7.14.1 (2026-08-31), PyTorch 2.12.0, Python 3.12
# GPU targets: gfx950 gfx942 gfx90a gfx908 gfx906 gfx900 gfx1201 gfx1200 gfx1153 gfx1152 gfx1151 gfx1150 gfx1103 gfx1102 gfx1101 gfx1100 gfx1036 gfx1035 gfx1034 gfx1033 gfx1032 gfx1031 gfx1030 gfx1012 gfx1011 gfx1010
# Build (repository root; .dockerignore keeps the context to pyproject.toml, README.md, src/): docker build -f env/docker/rocm-7.14.Dockerfile --build-arg GFX=gfx942 -t rocmlab:rocm-7.14 .
# Run as yourself: docker run --rm -it --device /dev/kfd --device /dev/dri --ipc=host --shm-size 8g --security-opt seccomp=unconfined --group-add video --group-add render --user "$(id -u):$(id -g)" -v "$PWD:/rocmlab" rocmlab:rocm-7.14
# CI runs it through `rocmlab env job` (ci/freshness_job.sh).

FROM python:3.12-slim-bookworm
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*
ARG GFX=gfx942
RUN pip install --no-cache-dir --index-url https://repo.amd.com/rocm/whl-multi-arch/ "torch[device-${GFX}]==2.12.0+rocm7.14.1"
ENV ROCMLAB_ENV=rocm-7.14 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/tmp/home
ENV ROCMLAB_CACHE=/rocmlab-cache HF_HOME=/rocmlab-cache/huggingface
RUN mkdir -p -m 1777 /tmp/home
WORKDIR /rocmlab
COPY pyproject.toml README.md /rocmlab/
COPY src /rocmlab/src
RUN pip install --no-cache-dir -e "/rocmlab[labs]"
CMD ["bash"]
