# Beam SDK worker image with tokenfactory installed: use it as the custom container on
# Dataflow (--sdk_container_image), Flink and Spark portable runners
# (--environment_type=DOCKER --environment_config=IMAGE), or as the worker-pool sidecar
# of a Flink task manager (--environment_type=EXTERNAL --environment_config=localhost:50000):
#   command: ["python", "-m", "pipelines.worker_pool", "--service_port=50000",
#             "--container_executable=/opt/apache/beam/boot"]
# (Beam's own sidecar is `/opt/apache/beam/boot --worker_pool`; ours also restarts a
# worker that dies before it connected, which otherwise leaves Flink waiting forever.)
FROM apache/beam_python3.11_sdk:2.77.0

WORKDIR /opt/tokenfactory
# The CPU build of torch (workers do not need CUDA for this pipeline). For GPU workers
# that rephrase in process (augment.rephrase.backend: runinference), build with
# --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 (or PyPI's default).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --no-cache-dir --index-url ${TORCH_INDEX} torch==2.13.0
COPY pyproject.toml README.md ./
COPY pipelines ./pipelines
COPY transforms ./transforms
COPY models ./models
COPY storage ./storage
COPY configs ./configs
# augment: transformers for the in-process rephrasing backend (RunInference)
RUN pip install --no-cache-dir ".[pipeline,augment]" && python -c "import pipelines.run, transforms.extract.html, transforms.augment.hf_backend"

# Two malloc arenas per SDK worker process: glibc's default (8 per core) keeps every
# arena's high-water mark resident as a worker's thread pool grows (pipelines/memory.py).
ENV MALLOC_ARENA_MAX=2
# The SDK harness entry point of the base image stays in charge.
ENTRYPOINT ["/opt/apache/beam/boot"]
