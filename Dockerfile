FROM python:3.11-slim
WORKDIR /srv/ferry
COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
COPY migrations ./migrations
RUN pip install --no-cache-dir .
VOLUME /data
EXPOSE 9000
CMD ["ferry", "serve"]
