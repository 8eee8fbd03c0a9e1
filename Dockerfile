# cyphal-servo image: the servo node and the simulated drive (sim-plant).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY cyphal_common ./cyphal_common
COPY servo_node ./servo_node
COPY sim_plant ./sim_plant
COPY sim_plant_node ./sim_plant_node
RUN pip install --no-cache-dir -e . \
 && useradd --create-home servo
# numba and the DSDL compiler cache their output; both need a writable place.
ENV NUMBA_CACHE_DIR=/home/servo/.cache/numba \
    CYPHAL_SERVO_CACHE=/home/servo/.cache/cyphal-servo \
    PYTHONUNBUFFERED=1
USER servo
WORKDIR /home/servo
# Compile the DSDL and warm the numba caches at build time so containers start fast.
RUN servo-node warmup
ENTRYPOINT ["servo-node"]
CMD ["run", "--registry", "/home/servo/servo_node.db"]
