# wirebroker in a container: `docker build -t wirebroker .` then
# `docker run -p 9092:9092 wirebroker serve --listeners=PLAINTEXT://0.0.0.0:9092 --advertised-listeners=PLAINTEXT://localhost:9092`
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocol protocol
COPY storage storage
COPY wirebroker wirebroker
COPY pipeline pipeline
RUN pip install --no-cache-dir .
VOLUME /data
EXPOSE 9092
ENTRYPOINT ["wirebroker"]
CMD ["serve", "--listeners=PLAINTEXT://0.0.0.0:9092", "--log-dirs=/data"]
