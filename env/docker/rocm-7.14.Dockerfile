# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# rocm-7.14: ROCm 7.14.0 (2026-07-16), PyTorch 2.12.0, Python 3.12
# GPU targets: gfx90a gfx942 gfx950 gfx1100 gfx1151 gfx1201
# Build (from the repository root): docker build -f env/docker/rocm-7.14.Dockerfile -t rocmlab:rocm-7.14 .
# Run: docker run --rm -it --device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 8g -v "$PWD:/work" rocmlab:rocm-7.14

FROM python:3.12-slim-bookworm
ARG GFX=gfx90a
RUN pip install --no-cache-dir --index-url https://repo.amd.com/rocm/whl-multi-arch/ "torch[device-${GFX}]==2.12.0+rocm7.14.0"
ENV ROCMLAB_ENV=rocm-7.14 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /work
COPY pyproject.toml README.md /work/
COPY src /work/src
RUN pip install --no-cache-dir -e "/work[labs]"
CMD ["bash"]
