# cyphal-servo image: the servo node, the simulated drive (sim-plant) and the coordinator (servo-coord), installed
# from the wheel as a user would. `docker build .` works as is where python:3.11-slim can be pulled and PyPI is
# reachable. Without either (air-gapped CI, this project's test machines), `make compose-test` passes
#   --build-arg BASE_IMAGE=<a local image, docker/base-image.sh>  --build-arg PIP_NO_INDEX=1
# and fills docker/wheelhouse/ with the host's pip: every pip below then installs from that folder only.
ARG BASE_IMAGE=python:3.11-slim

# Stage 1: build the sdist and, from it, the wheel (what `python -m build` makes for a release).
FROM ${BASE_IMAGE} AS build
ARG PIP_NO_INDEX
ENV PIP_FIND_LINKS=/wheelhouse PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY docker/wheelhouse /wheelhouse
WORKDIR /src
COPY pyproject.toml README.md MANIFEST.in ./
COPY cyphal_common ./cyphal_common
COPY servo_node ./servo_node
COPY sim_plant ./sim_plant
COPY sim_plant_node ./sim_plant_node
RUN pip install "build>=1.2" \
 && python -m build --outdir /dist .

# Stage 2: a venv with the wheel and its dependencies; no source tree, no build tools.
FROM ${BASE_IMAGE} AS runtime
ARG PIP_NO_INDEX
ENV PIP_FIND_LINKS=/wheelhouse PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY --from=build /dist/*.whl /tmp/
COPY docker/wheelhouse /wheelhouse
RUN python -m venv /opt/cyphal-servo \
 && /opt/cyphal-servo/bin/pip install /tmp/*.whl \
 && rm -rf /tmp/*.whl /wheelhouse \
 && useradd --create-home servo
COPY docker/entrypoint.sh /usr/local/bin/cyphal-servo-entrypoint
# The venv's commands (servo-node, sim-plant, servo-coord) first on PATH. numba and the DSDL compiler cache their
# output beside the user's home (the installed package is read-only to that user).
ENV PATH=/opt/cyphal-servo/bin:$PATH \
    NUMBA_CACHE_DIR=/home/servo/.cache/numba \
    CYPHAL_SERVO_CACHE=/home/servo/.cache/cyphal-servo \
    PYTHONUNBUFFERED=1 \
    PYTHONFAULTHANDLER=1
USER servo
WORKDIR /home/servo
# Compile the DSDL and warm the numba caches at build time so containers start fast.
RUN servo-node warmup
# UAVCAN__UDP__IFACE=auto (or unset): the container's own address (the entrypoint resolves it).
ENTRYPOINT ["cyphal-servo-entrypoint"]
CMD ["servo-node", "run", "--registry", "/home/servo/servo_node.db"]
# Is this node alive and well? A heartbeat of our node-ID, OPERATIONAL, health below WARNING (stdlib, ~50 ms).
HEALTHCHECK --interval=3s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-m", "cyphal_common.heartbeat_probe"]

# The test client of the compose bench: the same install plus yakut (`docker build --target tester`).
FROM runtime AS tester
USER root
COPY docker/wheelhouse /wheelhouse
ARG PIP_NO_INDEX
RUN /opt/cyphal-servo/bin/pip install "yakut>=0.14" && rm -rf /wheelhouse
COPY docker/checks.py /opt/checks/checks.py
USER servo
HEALTHCHECK NONE
CMD ["sleep", "infinity"]

# The default target: the servo image.
FROM runtime
