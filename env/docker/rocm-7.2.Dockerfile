# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# rocm-7.2: ROCm 7.2.4 (2026-05-29), PyTorch 2.10.0, Python 3.12
# GPU targets: gfx90a gfx942 gfx950 gfx1100 gfx1101 gfx1151 gfx1200 gfx1201
# Build (from the repository root): docker build -f env/docker/rocm-7.2.Dockerfile -t rocmlab:rocm-7.2 .
# Run: docker run --rm -it --device /dev/kfd --device /dev/dri --group-add video --ipc=host --shm-size 8g -v "$PWD:/work" rocmlab:rocm-7.2

FROM rocm/pytorch:rocm7.2.4_ubuntu24.04_py3.12_pytorch_release_2.10.0
ENV ROCMLAB_ENV=rocm-7.2 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /work
COPY pyproject.toml README.md /work/
COPY src /work/src
RUN pip install --no-cache-dir -e "/work[labs]"
CMD ["bash"]
