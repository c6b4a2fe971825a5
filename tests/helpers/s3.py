"""A real S3-compatible server for tests: moto in server mode on 127.0.0.1 (a free port)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def moto_s3(bucket: str, mirror: str) -> Iterator[str]:
    """Start a moto S3 server with ``bucket``, point ``AWS_*`` at it and ``ARBORAG_OBJECT_CACHE`` at
    ``mirror`` (the local mirror of remote corpora); yield the endpoint URL. The environment is
    restored and the server stopped on exit."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}", "ARBORAG_OBJECT_CACHE": mirror,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket=bucket)
        yield env["AWS_ENDPOINT_URL"]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
