"""fsspec's own test suite for filesystems (fsspec.tests.abstract: copy, get, put, open,
pipe) run on s3direct.fs.S3DirectFileSystem against the S3 server, each test in a folder
of its own in one bucket (a bucket each doubled the time). S3 has no empty folders
(supports_empty_directories is False), as for s3fs."""

from __future__ import annotations

import uuid

import pytest
from conftest import _empty_and_delete

fsspec = pytest.importorskip("fsspec")
abstract = pytest.importorskip("fsspec.tests.abstract")


@pytest.fixture(scope="module")
def shared_bucket(boto3_client):
    name = f"s3d-fsa-{uuid.uuid4().hex[:16]}"
    boto3_client.create_bucket(Bucket=name)
    yield name
    _empty_and_delete(boto3_client, name)


class S3DirectFixtures(abstract.AbstractFixtures):
    @pytest.fixture
    def fs(self, s3_env):
        from s3direct.fs import S3DirectFileSystem

        return S3DirectFileSystem(skip_instance_cache=True)

    @pytest.fixture
    def fs_path(self, shared_bucket):
        return f"{shared_bucket}/{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def supports_empty_directories(self):
        return False


class TestS3DirectCopy(abstract.AbstractCopyTests, S3DirectFixtures):
    pass


class TestS3DirectGet(abstract.AbstractGetTests, S3DirectFixtures):
    pass


class TestS3DirectPut(abstract.AbstractPutTests, S3DirectFixtures):
    pass


class TestS3DirectOpen(abstract.AbstractOpenTests, S3DirectFixtures):
    pass


class TestS3DirectPipe(abstract.AbstractPipeTests, S3DirectFixtures):
    pass
