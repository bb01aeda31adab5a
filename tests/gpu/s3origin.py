"""s3origin.py - a small S3 origin for machines where Ceph RGW cannot run (the lent GPU machine:
no network, no packages). Standard library only, objects as files under ROOT/BUCKET/KEY (on a
real disk), signatures not checked. It speaks what s3direct, boto3 and the AWS CLI use for
objects: bucket create/head/delete, ListObjectsV2, HEAD and GET (Range, If-Match,
If-None-Match; sendfile), PUT (single), multipart upload (create, upload part, complete,
abort, list parts not needed), DELETE object. Not a general S3 server: no versions, no ACLs,
no checksums, no tags (?tagging answers 501 NotImplemented: a PUT of it must not replace the
object). ETags are random per write (not an MD5 of the content: hashing every byte in
Python would make the origin, not the client, the bottleneck of the GPU rates), with the
"-N" part count suffix for multipart objects, and completion checks each part's ETag.

    python3 s3origin.py ROOT [--port N] [--host 127.0.0.1]

Prints "s3origin: http://HOST:PORT" once it listens (port 0 = any free one).
"""

import argparse
import hashlib
import html
import os
import re
import shutil
import sys
import threading
import time
import uuid
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 1 << 20
MAX_XML = 16 << 20


def _xml(s):
    return html.escape(str(s), quote=False)


def _iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


class Store:
    """Objects as files; metadata (ETag) in a sidecar ROOT/.meta/BUCKET/KEY."""

    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.lock = threading.Lock()
        os.makedirs(os.path.join(self.root, ".meta"), exist_ok=True)
        os.makedirs(os.path.join(self.root, ".uploads"), exist_ok=True)

    def path(self, bucket, key=""):
        p = os.path.normpath(os.path.join(self.root, bucket, key))
        if not p.startswith(self.root + os.sep) or bucket.startswith("."):
            raise ValueError("bad path")
        return p

    def meta(self, bucket, key):
        return os.path.join(self.root, ".meta", bucket, key)

    def etag(self, bucket, key, path):
        try:
            with open(self.meta(bucket, key)) as f:
                return f.read().strip()
        except OSError:  # placed on disk directly (the benchmark does): size and mtime
            st = os.stat(path)
            return '"%x-%x"' % (st.st_size, int(st.st_mtime_ns))

    def commit(self, bucket, key, tmp, etag):
        dst = self.path(bucket, key)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        m = self.meta(bucket, key)
        os.makedirs(os.path.dirname(m), exist_ok=True)
        with self.lock:
            os.replace(tmp, dst)
            with open(m, "w") as f:
                f.write(etag)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store: Store = None

    def log_message(self, *a):
        pass

    # --- helpers ---------------------------------------------------------------------------
    def _split(self):
        u = urlsplit(self.path)
        parts = unquote(u.path).lstrip("/").split("/", 1)
        bucket = parts[0]
        key = parts[1] if len(parts) > 1 else ""
        q = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        return bucket, key, q

    def _send(self, status, body=b"", headers=None, ctype="application/xml"):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if body or ctype:
            self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status, code, msg=""):
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code>"
                f"<Message>{_xml(msg)}</Message><RequestId>s3origin</RequestId></Error>").encode()
        self._send(status, body if self.command != "HEAD" else b"")

    def _read_body_to(self, f):
        n = int(self.headers.get("Content-Length", "0"))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise ValueError("chunked bodies are not supported")
        buf = memoryview(bytearray(CHUNK))
        left = n
        while left > 0:
            got = self.rfile.readinto(buf[:min(CHUNK, left)])
            if not got:
                raise ConnectionError("body cut short")
            f.write(buf[:got])
            left -= got
        return n

    def _read_small_body(self):
        n = int(self.headers.get("Content-Length", "0"))
        if n > MAX_XML:
            raise ValueError("body too large")
        return self.rfile.read(n)

    # --- verbs -----------------------------------------------------------------------------
    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        try:
            bucket, key, q = self._split()
            if not bucket:
                return self._list_buckets()
            bdir = self.store.path(bucket)
            if not os.path.isdir(bdir):
                return self._error(404, "NoSuchBucket", bucket)
            if not key:
                if self.command == "HEAD":
                    return self._send(200, ctype=None)
                return self._list(bucket, q)
            path = self.store.path(bucket, key)
            if not os.path.isfile(path):
                return self._error(404, "NoSuchKey", key)
            if "tagging" in q:
                return self._error(501, "NotImplemented", "tagging")
            self._get(bucket, key, path)
        except (ValueError, OSError) as e:
            self._error(400, "InvalidRequest", str(e))

    def _get(self, bucket, key, path):
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            size = st.st_size
            etag = self.store.etag(bucket, key, path)
            im = self.headers.get("If-Match")
            if im is not None and im.strip() not in (etag, "*"):
                return self._error(412, "PreconditionFailed", "If-Match")
            inm = self.headers.get("If-None-Match")
            if inm is not None and inm.strip() in (etag, "*"):
                return self._send(304, ctype=None, headers={"ETag": etag})
            start, end, status = 0, size - 1, 200
            rng = self.headers.get("Range")
            if rng:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
                if not m or (not m.group(1) and not m.group(2)):
                    return self._error(400, "InvalidRange", rng)
                if m.group(1):
                    start = int(m.group(1))
                    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
                else:
                    start, end = max(0, size - int(m.group(2))), size - 1
                if start >= size or start > end:
                    return self._error(416, "InvalidRange", rng)
                status = 206
            self.send_response(status)
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", formatdate(st.st_mtime, usegmt=True))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            self.end_headers()
            if self.command == "GET" and end >= start:
                self.connection.sendfile(f, start, end - start + 1)

    def _list_buckets(self):
        items = "".join(
            f"<Bucket><Name>{_xml(b)}</Name><CreationDate>"
            f"{_iso(os.stat(self.store.path(b)).st_ctime)}</CreationDate></Bucket>"
            for b in sorted(os.listdir(self.store.root)) if not b.startswith("."))
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListAllMyBucketsResult><Owner><ID>"
                f"s3origin</ID></Owner><Buckets>{items}</Buckets></ListAllMyBucketsResult>")
        self._send(200, body.encode())

    def _list(self, bucket, q):
        prefix = q.get("prefix", "")
        delim = q.get("delimiter", "")
        after = q.get("continuation-token") or q.get("start-after") or q.get("marker") or ""
        maxk = min(int(q.get("max-keys", "1000")), 1000)
        bdir = self.store.path(bucket)
        keys = []
        for d, _, files in os.walk(bdir):
            for fn in files:
                k = os.path.relpath(os.path.join(d, fn), bdir).replace(os.sep, "/")
                if k.startswith(prefix):
                    keys.append(k)
        keys.sort()
        contents, prefixes, n, trunc, last = [], [], 0, False, ""
        seen = set()
        for k in keys:
            if k <= after:
                continue
            if delim and delim in k[len(prefix):]:
                cp = k[:len(prefix) + k[len(prefix):].index(delim) + len(delim)]
                if cp in seen:
                    continue
                seen.add(cp)
                item = ("p", cp)
            else:
                item = ("k", k)
            if n == maxk:
                trunc = True
                break
            n += 1
            last = k if item[0] == "k" else item[1] + "\uffff"
            if item[0] == "p":
                prefixes.append(f"<CommonPrefixes><Prefix>{_xml(item[1])}</Prefix>"
                                "</CommonPrefixes>")
            else:
                p = os.path.join(bdir, k)
                st = os.stat(p)
                contents.append(
                    f"<Contents><Key>{_xml(k)}</Key><LastModified>{_iso(st.st_mtime)}"
                    f"</LastModified><ETag>{_xml(self.store.etag(bucket, k, p))}</ETag>"
                    f"<Size>{st.st_size}</Size><StorageClass>STANDARD</StorageClass>"
                    "</Contents>")
        token = f"<NextContinuationToken>{_xml(last)}</NextContinuationToken>" if trunc else ""
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult>"
                f"<Name>{_xml(bucket)}</Name><Prefix>{_xml(prefix)}</Prefix>"
                f"<KeyCount>{n}</KeyCount><MaxKeys>{maxk}</MaxKeys>"
                f"<IsTruncated>{'true' if trunc else 'false'}</IsTruncated>{token}"
                + "".join(contents) + "".join(prefixes) + "</ListBucketResult>")
        self._send(200, body.encode())

    def do_PUT(self):
        try:
            bucket, key, q = self._split()
            if not key:
                os.makedirs(self.store.path(bucket), exist_ok=True)
                return self._send(200, ctype=None)
            if not os.path.isdir(self.store.path(bucket)):
                self._read_body_to(open(os.devnull, "wb"))
                return self._error(404, "NoSuchBucket", bucket)
            if "tagging" in q:  # no tags here: refused, as a server without them does
                self._read_small_body()
                return self._error(501, "NotImplemented", "tagging")
            if "uploadId" in q:
                return self._upload_part(bucket, key, q)
            tmp = os.path.join(self.store.root, ".uploads", uuid.uuid4().hex)
            with open(tmp, "wb") as f:
                self._read_body_to(f)
            etag = f'"{uuid.uuid4().hex}"'
            self.store.commit(bucket, key, tmp, etag)
            self._send(200, headers={"ETag": etag}, ctype=None)
        except (ValueError, OSError, ConnectionError) as e:
            self._error(400, "InvalidRequest", str(e))

    def _upload_dir(self, q):
        uid = q["uploadId"]
        if not re.fullmatch(r"[0-9a-f]{32}", uid):
            raise ValueError("bad upload id")
        return os.path.join(self.store.root, ".uploads", uid)

    def _upload_part(self, bucket, key, q):
        d = self._upload_dir(q)
        if not os.path.isdir(d):
            self._read_body_to(open(os.devnull, "wb"))
            return self._error(404, "NoSuchUpload", q["uploadId"])
        n = int(q.get("partNumber", "0"))
        if not 1 <= n <= 10000:
            return self._error(400, "InvalidArgument", "partNumber")
        tag = uuid.uuid4().hex
        tmp = os.path.join(d, f"part.{n}.tmp.{tag}")
        with open(tmp, "wb") as f:
            self._read_body_to(f)
        os.replace(tmp, os.path.join(d, f"part.{n}"))
        with open(os.path.join(d, f"etag.{n}"), "w") as f:
            f.write(tag)
        self._send(200, headers={"ETag": f'"{tag}"'}, ctype=None)

    def do_POST(self):
        try:
            bucket, key, q = self._split()
            if "uploads" in q:
                if not os.path.isdir(self.store.path(bucket)):
                    return self._error(404, "NoSuchBucket", bucket)
                uid = uuid.uuid4().hex
                os.makedirs(os.path.join(self.store.root, ".uploads", uid))
                body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult>"
                        f"<Bucket>{_xml(bucket)}</Bucket><Key>{_xml(key)}</Key>"
                        f"<UploadId>{uid}</UploadId></InitiateMultipartUploadResult>")
                return self._send(200, body.encode())
            if "uploadId" in q:
                return self._complete(bucket, key, q)
            if "delete" in q:
                return self._delete_many(bucket)
            self._error(400, "InvalidRequest", "unsupported POST")
        except (ValueError, OSError) as e:
            self._error(400, "InvalidRequest", str(e))

    def _complete(self, bucket, key, q):
        d = self._upload_dir(q)
        doc = self._read_small_body().decode()
        if not os.path.isdir(d):
            return self._error(404, "NoSuchUpload", q["uploadId"])
        parts = re.findall(r"<Part>.*?<PartNumber>(\d+)</PartNumber>.*?</Part>", doc, re.S)
        etags = re.findall(r"<ETag>(.*?)</ETag>", doc, re.S)
        nums = [int(p) for p in parts]
        if not nums or nums != sorted(nums) or len(set(nums)) != len(nums):
            return self._error(400, "InvalidPartOrder", "parts must ascend")
        md5s = hashlib.md5()
        tmp = os.path.join(self.store.root, ".uploads", uuid.uuid4().hex)
        with open(tmp, "wb") as out:
            for i, n in enumerate(nums):
                p = os.path.join(d, f"part.{n}")
                try:
                    want = open(os.path.join(d, f"etag.{n}")).read()
                except OSError:
                    os.unlink(tmp)
                    return self._error(400, "InvalidPart", f"part {n}")
                given = html.unescape(etags[i]).strip('"') if i < len(etags) else ""
                if given != want:
                    os.unlink(tmp)
                    return self._error(400, "InvalidPart", f"part {n} ETag")
                md5s.update(bytes.fromhex(want))
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, CHUNK)
        etag = f'"{md5s.hexdigest()}-{len(nums)}"'
        self.store.commit(bucket, key, tmp, etag)
        shutil.rmtree(d, ignore_errors=True)
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><CompleteMultipartUploadResult>"
                f"<Bucket>{_xml(bucket)}</Bucket><Key>{_xml(key)}</Key>"
                f"<ETag>{_xml(etag)}</ETag></CompleteMultipartUploadResult>")
        self._send(200, body.encode())

    def _delete_many(self, bucket):
        doc = self._read_small_body().decode()
        out = []
        for k in re.findall(r"<Key>(.*?)</Key>", doc, re.S):
            k = html.unescape(k)
            self._unlink(bucket, k)
            out.append(f"<Deleted><Key>{_xml(k)}</Key></Deleted>")
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?><DeleteResult>" + "".join(out)
                + "</DeleteResult>")
        self._send(200, body.encode())

    def _unlink(self, bucket, key):
        for p in (self.store.path(bucket, key), self.store.meta(bucket, key)):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def do_DELETE(self):
        try:
            bucket, key, q = self._split()
            if "uploadId" in q:
                d = self._upload_dir(q)
                if not os.path.isdir(d):
                    return self._error(404, "NoSuchUpload", q["uploadId"])
                shutil.rmtree(d, ignore_errors=True)
                return self._send(204, ctype=None)
            if not key:
                bdir = self.store.path(bucket)
                if not os.path.isdir(bdir):
                    return self._error(404, "NoSuchBucket", bucket)
                if any(files for _, _, files in os.walk(bdir)):
                    return self._error(409, "BucketNotEmpty", bucket)
                shutil.rmtree(bdir)
                return self._send(204, ctype=None)
            self._unlink(bucket, key)
            self._send(204, ctype=None)
        except (ValueError, OSError) as e:
            self._error(400, "InvalidRequest", str(e))


def serve(root, host="127.0.0.1", port=0):
    """Starts the origin in a daemon thread; returns (server, endpoint URL)."""
    handler = type("H", (Handler,), {"store": Store(root)})
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://{host}:{srv.server_address[1]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    a = ap.parse_args()
    srv, url = serve(a.root, a.host, a.port)
    print(f"s3origin: {url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
