# Generated from env/matrix.toml by `rocmlab env dockerfiles`: edit the matrix, not this file.
# cpu-current: CPU, torch==2.14.1, transformers==5.25.0, peft==0.21.2, accelerate==1.16.0, tokenizers==0.23.3, triton==3.8.0, Python 3.11
# Build (repository root; .dockerignore keeps the context to pyproject.toml, README.md, src/): docker build -f env/docker/cpu-current.Dockerfile -t rocmlab:cpu-current .
# Run as yourself: docker run --rm -it --user "$(id -u):$(id -g)" -v "$PWD:/rocmlab" rocmlab:cpu-current
# CI runs it through `rocmlab env job` (ci/freshness_job.sh).

FROM python:3.11-slim-bookworm
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu "torch==2.14.1" "transformers==5.25.0" "peft==0.21.2" "accelerate==1.16.0" "tokenizers==0.23.3" "triton==3.8.0"
ENV ROCMLAB_ENV=cpu-current PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HOME=/tmp/home
ENV ROCMLAB_CACHE=/rocmlab-cache HF_HOME=/rocmlab-cache/huggingface
RUN mkdir -p -m 1777 /tmp/home
WORKDIR /rocmlab
COPY pyproject.toml README.md /rocmlab/
COPY src /rocmlab/src
RUN pip install --no-cache-dir -e "/rocmlab[labs]"
CMD ["bash"]
