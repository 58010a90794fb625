# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# rocm-7.1: ROCm 7.1.1 (2025-11-26), PyTorch 2.10.0, Python 3.12
# GPU targets: gfx90a gfx942 gfx950 gfx1100 gfx1101 gfx1150 gfx1151 gfx1200 gfx1201
# Build (from the repository root): docker build -f env/docker/rocm-7.1.Dockerfile -t rocmlab:rocm-7.1 .
# Run: docker run --rm -it --device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 8g -v "$PWD:/work" rocmlab:rocm-7.1

FROM python:3.12-slim-bookworm
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/rocm7.1 "torch==2.10.0+rocm7.1"
ENV ROCMLAB_ENV=rocm-7.1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /work
COPY pyproject.toml README.md /work/
COPY src /work/src
RUN pip install --no-cache-dir -e "/work[labs]"
CMD ["bash"]
