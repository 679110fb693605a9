"""A fake Hugging Face Hub on 127.0.0.1, to test the real HTTP path of huggingface_hub (2.x).

    with FakeHub() as hub:                                 # serving on 127.0.0.1:<free port>
        hub.add_repo("org/data", {"data/test.jsonl": raw}, kind="dataset", gated=True)
        hub.add_repo("org/model", files_of(model_dir))     # a model repo (not gated unless asked)
        hub.grant("hf_good", "org/data")                   # this token's account accepted the terms
        hub.add_user("hf_nope")                            # a valid token without access: 403
        hub.cut("data/test.jsonl", at=1000, times=1)       # the next GET drops the connection at byte 1000
        os.environ["HF_ENDPOINT"] = hub.url                # how a user points huggingface_hub at a mirror
        hub.requests                                       # every request: method, path, authorization, range

It answers what huggingface_hub sends for hf_hub_download, list_repo_files and snapshot_download:

    HEAD|GET /[datasets/]{repo}/resolve/{revision}/{path}   the file; X-Repo-Commit, ETag (git blob id) or,
                                                            for LFS files, X-Linked-Etag (sha256) and
                                                            X-Linked-Size; Content-Length; Range -> 206
    GET /api/{models|datasets}/{repo}[/revision/{rev}]      repo info: id, sha (the commit), gated, siblings
    GET /api/{models|datasets}/{repo}/tree/{rev}            recursive file listing: type, path, size, oid, lfs
    GET /api/agent-harnesses                                an empty registry (huggingface_hub fetches it
                                                            itself, anonymously, at most once a day)

{revision} is "main" or the repo's one commit id. Errors carry the X-Error-Code / X-Error-Message
headers the real Hub sends, so huggingface_hub raises its own exception classes:

    unknown token (any request)          401 "Invalid credentials in Authorization header"
    unknown repo                         401 RepoNotFound without a token, 404 with one
    gated file, no token                 401 GatedRepo "... Please log in."
    gated file, token without access     403 GatedRepo "... not in the authorized list ..."
    unknown revision / file              404 RevisionNotFound / EntryNotFound

As on the real Hub, a gated repo's info and file list are public; only its files need access.
Unlike the real Hub, LFS files are served in place instead of through a redirect to a CDN.
The server speaks HTTP/1.1 with keep-alive. `close()` (or leaving the `with` block) stops it and
joins every thread it started; close huggingface_hub's pooled connections first
(huggingface_hub.close_session()), or the connection threads wait for their read timeout.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_PATTERNS = ("*.safetensors", "*.bin", "*.jsonl")  # what a Hub repo's .gitattributes sends to LFS
THREAD_PREFIX = "fakehub"
HOST = "127.0.0.1"  # never another interface


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def files_of(folder: str | Path) -> dict[str, bytes]:
    """Every file under `folder`, keyed by its path relative to it (with forward slashes)."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@dataclass
class Repo:
    id: str
    kind: str  # "model" or "dataset"
    files: dict[str, bytes]
    gated: bool
    commit: str = ""

    def __post_init__(self):
        h = hashlib.sha1(self.id.encode())
        for path, data in sorted(self.files.items()):
            h.update(path.encode() + b"\0" + hashlib.sha256(data).digest())
        self.commit = h.hexdigest()

    @property
    def page(self) -> str:
        return ("datasets/" if self.kind == "dataset" else "") + self.id


@dataclass
class Request:
    method: str
    path: str
    authorization: str | None  # the raw header, e.g. "Bearer hf_..."; None when none was sent
    range: str | None
    status: int = 0


@dataclass
class Cut:
    at: int  # the file is never sent past this byte offset ...
    times: int | None  # ... by the next `times` GETs of it (None: every time)


class ErrorReply(Exception):
    """An error answer, with the headers the real Hub would send."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


@dataclass
class FakeHub:
    repos: dict[tuple[str, str], Repo] = field(default_factory=dict)
    users: set[str] = field(default_factory=set)
    grants: set[tuple[str, str]] = field(default_factory=set)
    cuts: dict[str, Cut] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    # -- setting up -------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes], kind: str = "model", gated: bool = False) -> Repo:
        repo = Repo(repo_id, kind, dict(files), gated)
        self.repos[(kind, repo_id)] = repo
        return repo

    def add_user(self, token: str) -> None:
        self.users.add(token)

    def grant(self, token: str, repo_id: str) -> None:
        """`token` is valid and its account has accepted `repo_id`'s terms."""
        self.users.add(token)
        self.grants.add((token, repo_id))

    def cut(self, path: str, at: int, times: int | None = 1) -> None:
        """The next `times` GETs of `path` (any repo) close the connection at byte `at` of the file."""
        self.cuts[path] = Cut(at, times)

    # -- running ----------------------------------------------------------------------------------
    def __enter__(self) -> FakeHub:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self._server = _Server((HOST, 0), _Handler)  # port 0: any free port
        self._server.hub = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name=f"{THREAD_PREFIX}-serve")
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()  # stop serve_forever ...
        self._server.server_close()  # ... close the socket and join the connection threads
        self._thread.join()

    # -- answering --------------------------------------------------------------------------------
    def caller(self, authorization: str | None) -> str | None:
        """The token of the request, after checking it; None for an anonymous request."""
        if authorization is None:
            return None
        token = authorization.removeprefix("Bearer ")
        if not authorization.startswith("Bearer ") or token not in self.users:
            raise ErrorReply(401, "Invalid credentials in Authorization header")
        return token

    def repo(self, kind: str, repo_id: str, token: str | None) -> Repo:
        repo = self.repos.get((kind, repo_id))
        if repo is None:
            # The real Hub does not tell an anonymous caller whether a private repo exists.
            raise ErrorReply(404 if token else 401, "Repository not found", "RepoNotFound")
        return repo

    def check_revision(self, repo: Repo, revision: str) -> None:
        if revision not in ("main", repo.commit):
            raise ErrorReply(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def check_access(self, repo: Repo, token: str | None) -> None:
        if not repo.gated or (token, repo.id) in self.grants:
            return
        what = f"{repo.kind} {repo.id}"
        if token is None:
            raise ErrorReply(
                401,
                f"Access to {what} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
                "GatedRepo",
            )
        raise ErrorReply(
            403,
            f"Access to {what} is restricted and you are not in the authorized list. "
            f"Visit https://huggingface.co/{repo.page} to ask for access.",
            "GatedRepo",
        )

    def is_lfs(self, path: str) -> bool:
        return any(fnmatch.fnmatch(path, pat) for pat in LFS_PATTERNS)

    def info(self, repo: Repo) -> dict:
        return {
            "id": repo.id,
            "sha": repo.commit,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "siblings": [{"rfilename": p} for p in sorted(repo.files)],
        }

    def tree(self, repo: Repo) -> list[dict]:
        out = []
        for path, data in sorted(repo.files.items()):
            entry = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
            if self.is_lfs(path):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            out.append(entry)
        return out

    def file_headers(self, repo: Repo, path: str) -> dict[str, str]:
        data = repo.files[path]
        headers = {
            "X-Repo-Commit": repo.commit,
            "ETag": f'"{git_blob_id(data)}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if self.is_lfs(path):
            headers["X-Linked-Etag"] = f'"{hashlib.sha256(data).hexdigest()}"'
            headers["X-Linked-Size"] = str(len(data))
        return headers

    def take_cut(self, path: str) -> int | None:
        """The byte offset where this GET of `path` must stop, if a cut is due."""
        cut = self.cuts.get(path)
        if cut is None:
            return None
        if cut.times is not None:
            cut.times -= 1
            if cut.times <= 0:
                del self.cuts[path]
        return cut.at


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the connection threads
    block_on_close = True
    hub: FakeHub


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # a kept-alive connection nobody closes ends after this many idle seconds
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - keep test output quiet
        pass

    def setup(self):
        threading.current_thread().name = f"{THREAD_PREFIX}-conn"
        super().setup()

    def do_HEAD(self):
        self._answer(head=True)

    def do_GET(self):
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        hub = self.server.hub
        record = Request(self.command, self.path, self.headers.get("Authorization"), self.headers.get("Range"))
        hub.requests.append(record)
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        try:
            if parts == ["api", "agent-harnesses"] and not head:
                record.status = 200
                body = json.dumps({"standardEnvVars": [], "harnesses": {}}).encode()
                self._send(200, {"Content-Type": "application/json"}, body, head=False)
            elif parts[:1] == ["api"] and not head:
                self._api(hub, parts[1:], parse_qs(url.query), record)
            elif "resolve" in parts:
                self._resolve(hub, parts, head, record)
            else:
                raise ErrorReply(404, f"the fake hub does not serve {self.command} {url.path}")
        except ErrorReply as e:
            record.status = e.status
            body = b"" if head else json.dumps({"error": e.message}).encode()
            headers = {"X-Error-Message": e.message, "Content-Type": "application/json", **e.headers}
            if e.code:
                headers["X-Error-Code"] = e.code
            self._send(e.status, headers, body, head)

    def _api(self, hub: FakeHub, parts: list[str], query: dict, record: Request) -> None:
        # parts: {models|datasets}, org, name, [revision, rev] | [tree, rev]
        if len(parts) < 3 or parts[0] not in ("models", "datasets"):
            raise ErrorReply(404, f"the fake hub has no API route /api/{'/'.join(parts)}")
        kind, repo_id, rest = parts[0][:-1], "/".join(parts[1:3]), parts[3:]
        token = hub.caller(self.headers.get("Authorization"))
        repo = hub.repo(kind, repo_id, token)
        if rest == [] or (len(rest) == 2 and rest[0] == "revision"):
            hub.check_revision(repo, rest[1] if rest else "main")
            payload = hub.info(repo)
        elif len(rest) == 2 and rest[0] == "tree":
            hub.check_revision(repo, rest[1])
            if query.get("recursive", ["false"])[0].lower() != "true":
                raise ErrorReply(400, "the fake hub lists trees recursively only")
            payload = hub.tree(repo)
        else:
            raise ErrorReply(404, f"the fake hub has no API route for {'/'.join(rest)}")
        record.status = 200
        self._send(200, {"Content-Type": "application/json"}, json.dumps(payload).encode(), head=False)

    def _resolve(self, hub: FakeHub, parts: list[str], head: bool, record: Request) -> None:
        kind = "dataset" if parts[0] == "datasets" else "model"
        parts = parts[1:] if kind == "dataset" else parts
        if len(parts) < 5 or parts[2] != "resolve":
            raise ErrorReply(404, "expected /[datasets/]org/name/resolve/revision/path")
        repo_id, revision, path = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        token = hub.caller(self.headers.get("Authorization"))
        repo = hub.repo(kind, repo_id, token)
        hub.check_revision(repo, revision)
        hub.check_access(repo, token)
        if path not in repo.files:
            raise ErrorReply(404, f"Entry not found: {path}", "EntryNotFound")
        data, headers = repo.files[path], hub.file_headers(repo, path)
        start, end, status = 0, len(data), 200
        wanted = self.headers.get("Range")
        if wanted and not head:  # "bytes=START-" or "bytes=START-LAST", what huggingface_hub sends
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            start, end = int(first), min(int(last) + 1 if last else len(data), len(data))
            if start >= len(data):
                raise ErrorReply(
                    416, "Requested range not satisfiable", headers={"Content-Range": f"bytes */{len(data)}"}
                )
            status, headers["Content-Range"] = 206, f"bytes {start}-{end - 1}/{len(data)}"
        headers["Content-Length"] = str(end - start)
        stop = None if head else hub.take_cut(path)
        record.status = status
        if stop is None:
            self._send(status, headers, data[start:end], head)
            return
        # A cut: announce the whole length, send the bytes before `stop`, then drop the connection.
        self._send(status, headers, data[start : max(start, min(stop, end))], head=False)
        self.close_connection = True

    def _send(self, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        self.send_response(status)
        headers = {"X-Request-Id": f"Root=fake-{uuid.uuid4().hex[:12]}", **headers}
        headers.setdefault("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self.wfile.flush()
