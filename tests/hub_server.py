"""A loopback Hugging Face Hub for tests: the HTTP endpoints huggingface_hub 2.x uses to push and pull model repos.

Start it, point clients at it with ``HF_ENDPOINT=http://127.0.0.1:PORT`` (any ``HF_TOKEN``), and read what was
pushed with `files`. Repos live in memory; every commit gets a new commit hash, and files are served from any
branch or commit. Uploads are always answered with ``uploadMode: "regular"``, so file contents come inline
(base64) in the commit; nothing goes through LFS or Xet storage.

Endpoints (model repos ``namespace/name``):

* ``POST /api/repos/create``, ``GET /api/whoami-v2``, ``POST /api/validate-yaml``, ``GET /api/agent-harnesses``
* ``POST /api/models/{repo}/preupload/{rev}``, ``POST /api/models/{repo}/commit/{rev}`` (ndjson)
* ``GET /api/models/{repo}[/revision/{rev}]``, ``GET /api/models/{repo}/tree/{rev}[/{path}]``,
  ``POST /api/models/{repo}/paths-info/{rev}``, ``GET /api/models/{repo}/refs``
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` with ``X-Repo-Commit``, ``ETag`` and, on 404, ``X-Error-Code``

Example:

```python
>>> with LoopbackHub() as hub:  # doctest: +SKIP
...     os.environ["HF_ENDPOINT"] = hub.endpoint
...     ...  # push_to_hub / from_pretrained in a subprocess that inherits the environment
...     hub.files("tester/my-model")["config.json"]
```
"""

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

USER = "tester"
DEFAULT_BRANCH = "main"
# What the Hub puts in a new repo's first commit (shortened).
INITIAL_GITATTRIBUTES = (
    b"*.bin filter=lfs diff=lfs merge=lfs -text\n"
    b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
)

_REPO = r"(?P<repo>[\w.-]+/[\w.-]+)"
_API_REPO = rf"^/api/models/{_REPO}"


def git_blob_id(content: bytes) -> str:
    """Git's object id of a file (what the Hub reports as a regular file's oid and ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Commit:
    """One commit: its id, message and the complete file tree it leaves."""

    oid: str
    summary: str
    files: dict[str, bytes]
    date: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"))


@dataclass
class Repo:
    """A model repo: its commits (by id) and branches (name -> commit id)."""

    repo_id: str
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"))

    def resolve(self, revision: str) -> Commit | None:
        """The commit a branch name or a commit id points to, or None."""
        revision = unquote(revision)
        if revision in self.branches:
            return self.commits[self.branches[revision]]
        return self.commits.get(revision)

    def commit(self, branch: str, summary: str, files: dict[str, bytes]) -> Commit:
        parent = self.branches.get(branch, "")
        digest = hashlib.sha1(f"{self.repo_id}\0{parent}\0{summary}\0{len(self.commits)}".encode())
        for path in sorted(files):
            digest.update(path.encode() + b"\0" + git_blob_id(files[path]).encode())
        new = Commit(oid=digest.hexdigest(), summary=summary, files=dict(files))
        self.commits[new.oid] = new
        self.branches[branch] = new.oid
        return new


class LoopbackHub:
    """The loopback Hub server: a context manager that serves on 127.0.0.1 on a free port.

    Attributes:
        endpoint: The URL to put in ``HF_ENDPOINT``.
        requests: ``"METHOD /path"`` of every request received, in order.
        unhandled: Requests no route matched (answered 404): a test can assert there were none.
    """

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[str] = []
        self.unhandled: list[str] = []
        self.lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="loopback-hub", daemon=True)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "LoopbackHub":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def files(self, repo_id: str, revision: str = DEFAULT_BRANCH) -> dict[str, bytes]:
        """The files of a repo at a revision (a copy); raises KeyError for an unknown repo or revision."""
        with self.lock:
            commit = self.repos[repo_id].resolve(revision)
            if commit is None:
                raise KeyError(f"{repo_id} has no revision {revision!r}")
            return dict(commit.files)

    def commit_summaries(self, repo_id: str) -> list[str]:
        """Messages of the commits of a repo, oldest first."""
        with self.lock:
            return [commit.summary for commit in self.repos[repo_id].commits.values()]

    # ------------------------------------------------------------------------------------------------ routes
    def route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> "_Response":
        routes = [
            ("POST", r"^/api/repos/create$", self._create_repo),
            ("GET", r"^/api/whoami-v2$", self._whoami),
            ("GET", r"^/api/agent-harnesses$", self._agent_harnesses),
            ("POST", r"^/api/validate-yaml$", self._validate_yaml),
            ("POST", _API_REPO + r"/preupload/(?P<rev>[^/]+)$", self._preupload),
            ("POST", _API_REPO + r"/commit/(?P<rev>[^/]+)$", self._commit),
            ("GET", _API_REPO + r"(?:/revision/(?P<rev>[^/]+))?$", self._repo_info),
            ("GET", _API_REPO + r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$", self._tree),
            ("POST", _API_REPO + r"/paths-info/(?P<rev>[^/]+)$", self._paths_info),
            ("GET", _API_REPO + r"/refs$", self._refs),
            ("HEAD", rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$", self._resolve),
            ("GET", rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$", self._resolve),
        ]
        for route_method, pattern, handler in routes:
            match = re.match(pattern, path)
            if match and method == route_method:
                with self.lock:
                    return handler(method=method, query=query, body=body, **match.groupdict())
        self.unhandled.append(f"{method} {path}")
        return _error(404, "NotFound", f"No loopback Hub route for {method} {path}")

    def _create_repo(self, body: bytes, **_: Any) -> "_Response":
        payload = json.loads(body)
        if payload.get("type", "model") != "model":
            return _error(400, "BadRequest", "The loopback Hub only hosts model repos.")
        repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
        url = {"url": f"{{endpoint}}/{repo_id}", "name": repo_id, "id": repo_id}
        if repo_id in self.repos:
            return _Response(409, {"error": "You already created this model repo", **url})
        repo = self.repos[repo_id] = Repo(repo_id)
        repo.commit(DEFAULT_BRANCH, "initial commit", {".gitattributes": INITIAL_GITATTRIBUTES})
        return _Response(200, url)

    def _whoami(self, **_: Any) -> "_Response":
        token = {"displayName": "loopback", "role": "write"}
        return _Response(200, {"type": "user", "name": USER, "fullname": "Loopback Tester", "orgs": [],
                               "auth": {"type": "access_token", "accessToken": token}})

    def _agent_harnesses(self, **_: Any) -> "_Response":
        # Registry huggingface_hub fetches for its user-agent telemetry; empty = no agent detection.
        return _Response(200, {"standardEnvVars": [], "harnesses": {}})

    def _validate_yaml(self, **_: Any) -> "_Response":
        return _Response(200, {"errors": [], "warnings": []})

    def _preupload(self, repo: str, rev: str, body: bytes, **_: Any) -> "_Response":
        found = self._find(repo, rev)
        if isinstance(found, _Response):
            return found
        files = [
            {
                "path": item["path"],
                "uploadMode": "regular",  # contents come inline, base64, in the commit
                "shouldIgnore": False,
                "oid": git_blob_id(found.files[item["path"]]) if item["path"] in found.files else None,
            }
            for item in json.loads(body)["files"]
        ]
        return _Response(200, {"files": files, "commitOid": found.oid})

    def _commit(self, repo: str, rev: str, query: dict, body: bytes, **_: Any) -> "_Response":
        if query.get("create_pr"):
            return _error(400, "BadRequest", "The loopback Hub does not support pull requests.")
        found = self._find(repo, rev)
        if isinstance(found, _Response):
            return found
        branch = unquote(rev)
        if branch not in self.repos[repo].branches:
            return _error(400, "BadRequest", f"Commits go to a branch; {branch!r} is not one.")
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            return _error(400, "BadRequest", "A commit starts with a header line.")
        header = lines[0]["value"]
        if header.get("parentCommit") not in (None, found.oid):
            return _error(412, "BadRequest", "parentCommit is not the head of the branch.")
        files = dict(found.files)
        for line in lines[1:]:
            key, value = line["key"], line["value"]
            if key == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                files = {path: data for path, data in files.items() if not path.startswith(prefix)}
            else:
                return _error(400, "BadRequest", f"Unsupported commit operation {key!r} (only regular uploads).")
        commit = self.repos[repo].commit(branch, header["summary"], files)
        return _Response(200, {"success": True, "commitOid": commit.oid, "pullRequestUrl": None,
                               "commitUrl": f"{{endpoint}}/{repo}/commit/{commit.oid}"})

    def _repo_info(self, repo: str, rev: str | None, **_: Any) -> "_Response":
        found = self._find(repo, rev or DEFAULT_BRANCH)
        if isinstance(found, _Response):
            return found
        siblings = [{"rfilename": path, "size": len(data), "blobId": git_blob_id(data)}
                    for path, data in sorted(found.files.items())]
        return _Response(200, {"id": repo, "modelId": repo, "author": repo.split("/")[0], "sha": found.oid,
                               "private": False, "disabled": False, "gated": False, "tags": [],
                               "lastModified": found.date, "createdAt": self.repos[repo].created_at,
                               "siblings": siblings})

    def _tree(self, repo: str, rev: str, path: str | None, query: dict, **_: Any) -> "_Response":
        found = self._find(repo, rev)
        if isinstance(found, _Response):
            return found
        prefix = f"{unquote(path).strip('/')}/" if path else ""
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        entries, folders = [], set()
        for file_path, data in sorted(found.files.items()):
            if not file_path.startswith(prefix):
                continue
            rest = file_path[len(prefix):]
            if "/" in rest and not recursive:
                folders.add(prefix + rest.split("/")[0])
                continue
            entries.append(_file_entry(file_path, data))
        entries += [{"type": "directory", "oid": git_blob_id(name.encode()), "size": 0, "path": name}
                    for name in sorted(folders)]
        if path and not entries:
            return _error(404, "EntryNotFound", f"{path} does not exist at {rev}", commit=found.oid)
        return _Response(200, entries)

    def _paths_info(self, repo: str, rev: str, body: bytes, **_: Any) -> "_Response":
        found = self._find(repo, rev)
        if isinstance(found, _Response):
            return found
        try:
            paths = json.loads(body)["paths"]
        except (ValueError, KeyError):
            paths = parse_qs(body.decode()).get("paths", [])
        return _Response(200, [_file_entry(path, found.files[path]) for path in paths if path in found.files])

    def _refs(self, repo: str, **_: Any) -> "_Response":
        if repo not in self.repos:
            return _error(404, "RepoNotFound", f"Repository {repo} not found")
        branches = [{"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid}
                    for name, oid in self.repos[repo].branches.items()]
        return _Response(200, {"branches": branches, "tags": [], "converts": [], "pullRequests": []})

    def _resolve(self, method: str, repo: str, rev: str, path: str, **_: Any) -> "_Response":
        found = self._find(repo, rev)
        if isinstance(found, _Response):
            return found
        path = unquote(path)
        if path not in found.files:
            return _error(404, "EntryNotFound", f"{path} does not exist at {rev}", commit=found.oid)
        data = found.files[path]
        headers = {"X-Repo-Commit": found.oid, "ETag": f'"{git_blob_id(data)}"',
                   "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        return _Response(200, data, headers=headers)

    def _find(self, repo: str, revision: str) -> "Commit | _Response":
        if repo not in self.repos:
            return _error(404, "RepoNotFound", f"Repository {repo} not found")
        commit = self.repos[repo].resolve(revision)
        if commit is None:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {unquote(revision)}")
        return commit


@dataclass
class _Response:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)

    def encode(self, endpoint: str) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        # Response URLs name the server itself, which only the request handler knows.
        return json.dumps(self.body).replace("{endpoint}", endpoint).encode()


def _error(status: int, code: str, message: str, commit: str | None = None) -> _Response:
    headers = {"X-Error-Code": code, "X-Error-Message": message}
    if commit is not None:
        headers["X-Repo-Commit"] = commit
    return _Response(status, {"error": message}, headers=headers)


def _file_entry(path: str, data: bytes) -> dict[str, Any]:
    return {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}


def _handler_class(hub: LoopbackHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real Hub; every answer has a Content-Length

        def do_GET(self) -> None:
            self._answer("GET")

        def do_HEAD(self) -> None:
            self._answer("HEAD")

        def do_POST(self) -> None:
            self._answer("POST")

        def _answer(self, method: str) -> None:
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hub.requests.append(f"{method} {url.path}")
            # Routing sees the raw path: a quoted revision such as refs%2Fpr%2F1 stays one path segment.
            response = hub.route(method, url.path, parse_qs(url.query), body)
            payload = response.encode(hub.endpoint)
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            if not isinstance(response.body, bytes):
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request log is `hub.requests`; stderr stays clean

    return Handler
