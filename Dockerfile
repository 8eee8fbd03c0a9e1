# cyphal-servo image: the servo node and the simulated drive (sim-plant), installed from the wheel as a user would.

# Stage 1: build the sdist and, from it, the wheel (what `python -m build` makes for a release).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md MANIFEST.in ./
COPY cyphal_common ./cyphal_common
COPY servo_node ./servo_node
COPY sim_plant ./sim_plant
COPY sim_plant_node ./sim_plant_node
RUN pip install --no-cache-dir "build>=1.2" \
 && python -m build --outdir /dist .

# Stage 2: a venv with the wheel and its dependencies; no source tree, no build tools.
FROM python:3.11-slim
COPY --from=build /dist/*.whl /tmp/
RUN python -m venv /opt/cyphal-servo \
 && /opt/cyphal-servo/bin/pip install --no-cache-dir /tmp/*.whl \
 && rm /tmp/*.whl \
 && useradd --create-home servo
# The venv's commands (servo-node, sim-plant) first on PATH. numba and the DSDL compiler cache their output beside
# the user's home (the installed package is read-only to that user).
ENV PATH=/opt/cyphal-servo/bin:$PATH \
    NUMBA_CACHE_DIR=/home/servo/.cache/numba \
    CYPHAL_SERVO_CACHE=/home/servo/.cache/cyphal-servo \
    PYTHONUNBUFFERED=1
USER servo
WORKDIR /home/servo
# Compile the DSDL and warm the numba caches at build time so containers start fast.
RUN servo-node warmup
ENTRYPOINT ["servo-node"]
CMD ["run", "--registry", "/home/servo/servo_node.db"]
