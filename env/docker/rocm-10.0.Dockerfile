# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# rocm-10.0: ROCm 10.0.0 (2026-08-26), PyTorch 2.11.0, Python 3.12
# GPU targets: gfx942 gfx950 gfx1100 gfx1151 gfx1201
# Build (from the repository root): docker build -f env/docker/rocm-10.0.Dockerfile -t rocmlab:rocm-10.0 .
# Run: docker run --rm -it --device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 8g -v "$PWD:/work" rocmlab:rocm-10.0

FROM python:3.12-slim-bookworm
ARG GFX=gfx942
RUN pip install --no-cache-dir --index-url https://stable.repo.amd.com/rocm/whl-next/ "torch[device-${GFX}]==2.11.0+rocm10.0.0"
ENV ROCMLAB_ENV=rocm-10.0 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /work
COPY pyproject.toml README.md /work/
COPY src /work/src
RUN pip install --no-cache-dir -e "/work[labs]"
CMD ["bash"]
