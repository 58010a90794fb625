# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# rocm-6.4: ROCm 6.4.4 (2025-09-24), PyTorch 2.8.0, Python 3.12
# GPU targets: gfx90a gfx942 gfx1100 gfx1101 gfx1200 gfx1201
# Build (from the repository root): docker build -f env/docker/rocm-6.4.Dockerfile -t rocmlab:rocm-6.4 .
# Run: docker run --rm -it --device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 8g -v "$PWD:/work" rocmlab:rocm-6.4

FROM python:3.12-slim-bookworm
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/rocm6.4 "torch==2.8.0+rocm6.4"
ENV ROCMLAB_ENV=rocm-6.4 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /work
COPY pyproject.toml README.md /work/
COPY src /work/src
RUN pip install --no-cache-dir -e "/work[labs]"
CMD ["bash"]
