"""jupyter_pause/openapi.yaml tells the truth: valid OpenAPI, the same routes and
methods as the server, and real responses that match its schemas."""

import asyncio
import json
import re
import typing
from pathlib import Path

import jsonschema
import pytest
import referencing
import referencing.jsonschema
import yaml

import jupyter_pause
from jupyter_pause.ledger import EventType
from jupyter_pause.lifecycle import LiveState, Operation, State
from jupyter_pause.protocol import CallProgress
from jupyter_pause.server.handlers import NAMESPACE, ROUTES

from .helpers import start_session, wait_for_state, wait_operation

SPEC_FILE = Path(jupyter_pause.__file__).parent / "openapi.yaml"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
HANDLER_METHODS = ("get", "post", "put", "patch", "delete")
SPEC_URI = "urn:jupyter-pause:openapi"
GROUP = re.compile(r"\(\?P<(\w+)>(.*?)\)(?![^(]*\))")


@pytest.fixture(scope="module")
def spec():
    return yaml.safe_load(SPEC_FILE.read_text())


def operations(spec):
    """(path, method, operation object) for every operation in the spec."""
    for path, item in spec["paths"].items():
        for method in HTTP_METHODS:
            if method in item:
                yield path, method, item[method]


def resolve(spec, node):
    """Follow a local ``$ref`` (one level)."""
    if isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref.startswith("#/"), ref
        target = spec
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return target
    return node


def walk_refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from walk_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk_refs(value)


# ------------------------------------------------------------- the document


def test_the_spec_is_valid_openapi(spec):
    try:
        from openapi_spec_validator import validate
    except ImportError:
        validate = None
    if validate is not None:
        validate(spec)

    # structural checks, with or without the validator
    assert spec["openapi"].startswith("3.1.")
    assert spec["info"]["title"] and spec["info"]["version"]
    assert spec["servers"][0]["url"] == "{base_url}" + NAMESPACE
    schemes = spec["components"]["securitySchemes"]
    where = {name: (s["type"], s["in"], s["name"]) for name, s in schemes.items()}
    assert where == {
        "token": ("apiKey", "header", "Authorization"),
        "xsrfCookie": ("apiKey", "cookie", "_xsrf"),
        "xsrfHeader": ("apiKey", "header", "X-XSRFToken"),
    }
    assert spec["security"] == [{"token": []}, {"xsrfCookie": [], "xsrfHeader": []}]
    for ref in walk_refs(spec):
        resolve(spec, {"$ref": ref})  # every reference points somewhere
    seen_ids = set()
    for path, method, op in operations(spec):
        where = f"{method.upper()} {path}"
        assert op["summary"], where
        assert op["operationId"] not in seen_ids, where
        seen_ids.add(op["operationId"])
        assert "security" not in op, f"{where}: every endpoint needs the server's authentication"
        codes = set(op["responses"])
        assert "403" in codes, f"{where}: unauthenticated requests get 403"
        assert any(c.startswith("2") for c in codes), where
        for code, response in op["responses"].items():
            response = resolve(spec, response)
            if code.startswith(("4", "5")):
                # API errors are JSON; an HTML page's errors are HTML pages
                content = response["content"]
                if "application/json" in content:
                    schema = content["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, f"{where} {code}"
                else:
                    assert set(content) == {"text/html"}, f"{where} {code}"
        if "requestBody" in op or any(
            resolve(spec, p)["in"] == "query" and resolve(spec, p).get("required")
            for p in op.get("parameters", [])
        ):
            assert "400" in codes, f"{where}: a bad body or path gets 400"


DOCUMENTS = [
    SPEC_FILE.parents[1] / "README.md",
    *sorted((SPEC_FILE.parents[1] / "docs").glob("*.md")),
]
DOC_REQUEST = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) jupyter-pause/api/([^`\s]*)")


def test_the_requests_the_docs_name_are_in_the_spec(spec):
    """``GET jupyter-pause/api/report?since=&until=`` in a document: that method, that
    path and those query parameters are in the spec."""
    named = [
        (doc.name, m[1], m[2]) for doc in DOCUMENTS for m in DOC_REQUEST.finditer(doc.read_text())
    ]
    assert named
    for doc, method, request in named:
        path, _, query = request.partition("?")
        templates = [
            p for p in spec["paths"] if re.fullmatch(re.sub(r"\{\w+\}", "[^/]+", p), "/" + path)
        ]
        where = f"{doc}: {method} {request}"
        assert templates, where
        op = spec["paths"][templates[0]].get(method.lower())
        assert op is not None, where
        params = {resolve(spec, p)["name"] for p in op.get("parameters", [])}
        for pair in filter(None, query.split("&")):
            assert pair.partition("=")[0] in params, where


def test_enums_match_the_code(spec):
    schemas = spec["components"]["schemas"]
    assert schemas["EventType"]["enum"] == [t.value for t in EventType]
    assert schemas["State"]["enum"] == [s.value for s in State]
    assert schemas["Session"]["properties"]["live_state"]["enum"] == [s.value for s in LiveState]
    phases = typing.get_args(typing.get_type_hints(CallProgress)["phase"])
    assert schemas["CallProgress"]["properties"]["phase"]["enum"] == list(phases)


# ------------------------------------------------------------- routes


def implemented_methods(handler) -> set[str]:
    """HTTP methods the handler class (or a jupyter-pause base class) defines."""
    return {
        method
        for method in HANDLER_METHODS
        for klass in handler.__mro__
        if klass.__module__.startswith("jupyter_pause.") and method in vars(klass)
    }


def route_template(pattern: str) -> tuple[str, dict[str, str]]:
    """``jupyter-pause/api/operations/(?P<operation_id>...)`` -> ``/operations/{operation_id}``."""
    assert pattern.startswith(NAMESPACE + "/"), pattern
    params = dict(GROUP.findall(pattern))
    template = GROUP.sub(lambda m: "{" + m.group(1) + "}", pattern)[len(NAMESPACE) :]
    template = re.sub(r"\\(.)", r"\1", template)  # report\.html -> report.html
    assert not re.search(r"[\\^$*+?()\[\]|]", template), f"{pattern}: not a plain path"
    return template, params


def test_every_route_and_method_is_described_and_nothing_else(spec):
    from_routes = {}
    for pattern, handler in ROUTES:
        template, params = route_template(pattern)
        from_routes[template] = implemented_methods(handler)
        assert from_routes[template], f"{handler.__name__} implements no HTTP method"
        item = spec["paths"].get(template)
        if item is None:
            continue  # reported below, all at once
        # path parameters: the same names, and the same regex as the route
        for _, method, op in operations({"paths": {template: item}}):
            declared = {
                p["name"]: p
                for p in map(
                    lambda p: resolve(spec, p),
                    [*item.get("parameters", []), *op.get("parameters", [])],
                )
                if p["in"] == "path"
            }
            assert set(declared) == set(params), f"{method.upper()} {template}"
            for name, regex in params.items():
                assert declared[name]["required"] is True
                assert declared[name]["schema"]["pattern"] == f"^{regex}$", (template, name)

    from_spec = {
        path: {m for m in HTTP_METHODS if m in item} for path, item in spec["paths"].items()
    }
    assert from_spec == from_routes


# ------------------------------------------------------------- real responses


class Contract:
    """Checks real answers against the spec: documented status code and media
    type, and a body that validates against the response schema."""

    def __init__(self, spec):
        self.spec = spec
        resource = referencing.Resource.from_contents(
            spec, default_specification=referencing.jsonschema.DRAFT202012
        )
        self.registry = referencing.Registry().with_resource(SPEC_URI, resource)
        self.checked: set[tuple[str, str]] = set()

    def check(self, path: str, method: str, response):
        """Validate a tornado response to ``method path``; returns its body (JSON parsed)."""
        code = response.code
        where = f"{method.upper()} {path} -> {code}"
        answers = self.spec["paths"][path][method]["responses"]
        assert str(code) in answers, (
            f"{where}: status code not in the spec: {response.body[:300]!r}"
        )
        pointer = ["paths", path, method, "responses", str(code)]
        answer = answers[str(code)]
        if "$ref" in answer:
            pointer = answer["$ref"][2:].split("/")
            answer = resolve(self.spec, answer)
        self.checked.add((path, method))
        if "content" not in answer:
            assert not response.body, f"{where}: the spec says no body: {response.body[:300]!r}"
            return None
        media = response.headers.get("Content-Type", "").split(";")[0].strip()
        assert media in answer["content"], (
            f"{where}: {media} is not one of {list(answer['content'])}"
        )
        text = response.body.decode()
        body = json.loads(text) if media == "application/json" else text
        pointer += ["content", media, "schema"]
        escaped = "/".join(p.replace("~", "~0").replace("/", "~1") for p in pointer)
        validator = jsonschema.Draft202012Validator(
            {"$ref": f"{SPEC_URI}#/{escaped}"}, registry=self.registry
        )
        errors = sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))
        assert not errors, f"{where}: " + "; ".join(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors
        )
        return body


def test_an_operation_under_way_with_its_progress_matches_the_spec(spec):
    """A running call's progress is in memory only and too brief for the answers above
    to see (tests/test_remote_store_server.py holds one): its JSON against the schema."""
    op = Operation(kind="pause", path="nb.ipynb", progress=CallProgress("uploading", 3, 8))
    contract = Contract(spec)
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"{SPEC_URI}#/components/schemas/Operation"}, registry=contract.registry
    )
    assert not list(validator.iter_errors(op.to_json()))
    op.progress = None
    assert not list(validator.iter_errors(op.to_json()))
    op.progress = CallProgress("thinking", 3, 8)  # type: ignore[arg-type]
    assert list(validator.iter_errors(op.to_json()))


async def test_real_responses_match_the_spec(jp_fetch, jp_serverapp, notebook_path, spec):
    contract = Contract(spec)
    nb = {"path": notebook_path}

    async def call(method, path, *, body=None, params=None, values=None, **kwargs):
        """Call ``method path`` (a spec path, filled in with ``values``); check the answer."""
        parts = path.format(**(values or {})).strip("/").split("/")
        if body is not None:
            kwargs["body"] = body if isinstance(body, str) else json.dumps(body)
        response = await jp_fetch(
            "jupyter-pause",
            "api",
            *parts,
            method=method.upper(),
            params=params,
            raise_error=False,
            follow_redirects=False,
            **kwargs,
        )
        return response.code, contract.check(path, method, response)

    # unauthenticated: 403 for the API, a redirect to the login page for the HTML page
    code, body = await call("get", "/status", headers={"Authorization": ""})
    assert code == 403
    code, _ = await call("get", "/report.html", headers={"Authorization": ""})
    assert code == 302

    model = await start_session(jp_fetch, notebook_path)
    await wait_for_state(jp_serverapp, model["kernel"]["id"], "idle")

    code, status = await call("get", "/status")
    assert [s["path"] for s in status["sessions"]] == [notebook_path]

    # one checkpoint accepted, a concurrent one refused naming the running operation
    answers = await asyncio.gather(
        *(call("post", "/sessions/checkpoint", body=nb) for _ in range(2))
    )
    assert sorted(code for code, _ in answers) == [202, 409]
    (accepted,) = [body for code, body in answers if code == 202]
    (refused,) = [body for code, body in answers if code == 409]
    operation = {"operation_id": accepted["operation"]["id"]}
    assert refused["operation"]["id"] == operation["operation_id"]

    await call("get", "/operations/{operation_id}", values=operation)  # while running
    assert (await wait_operation(jp_fetch, operation["operation_id"]))["outcome"] == "succeeded"
    code, body = await call("get", "/operations/{operation_id}", values=operation)
    assert body["finished"] is not None

    code, listing = await call("get", "/checkpoints", params=nb)
    (checkpoint,) = listing["checkpoints"]
    code, body = await call(
        "post", "/sessions/checkpointed", body={**nb, "checkpoint_id": checkpoint["id"]}
    )
    assert code == 200 and body["last_checkpoint"]["id"] == checkpoint["id"]
    # a kernel's report of damage found after a resume: this notebook's last operation
    # is no resume, so it is refused
    damage = {"checkpoint_id": checkpoint["id"], "recovered": {}, "lost": ["big"]}
    code, body = await call("post", "/sessions/restored", body={**nb, **damage, **operation})
    assert code == 409, body
    code, body = await call("post", "/sessions/restored", body={**nb, "lost": "big"})
    assert code == 400, body
    code, verified = await call("get", "/checkpoints", params={**nb, "verify": "1"})
    assert verified["checkpoints"][0]["problem"] is None

    code, body = await call("get", "/sessions/unsaveable", params=nb)
    assert code == 200 and body["unsaveable"] == {}

    code, events = await call("get", "/events")
    last = events["events"][0]["id"]
    code, body = await call("get", "/events", params={"after_id": str(last), **nb})
    assert body["events"]
    assert all(e["id"] > last and e["path"] == notebook_path for e in body["events"])

    code, body = await call("get", "/activity")
    assert [s["path"] for s in body["sessions"]] == [notebook_path]

    code, body = await call("post", "/sessions/postpone", body=nb)
    assert code == 200

    # errors: 400 bad body / path / query, 404 unknown things, 409 wrong state
    for request, expected in [
        ({}, 400),
        ({"path": 7}, 400),
        ({"path": "../outside.ipynb"}, 400),
        ("[1]", 400),
        ("{not json", 400),
        ({"path": "missing.ipynb"}, 404),
    ]:
        code, body = await call("post", "/sessions/pause", body=request)
        assert code == expected, (request, body)
    code, _ = await call("post", "/sessions/resume", body={**nb, "checkpoint_id": 5})
    assert code == 400
    code, body = await call("post", "/sessions/resume", body=nb)
    assert code == 409 and "operation" not in body
    code, body = await call("post", "/sessions/prewarm", body=nb)  # running: no spare
    assert code == 409
    code, body = await call("post", "/sessions/prewarm", body={"path": 7})
    assert code == 400
    # no GPU here: the server says it cannot hibernate, and why; nothing to wake
    code, body = await call("post", "/sessions/hibernate", body={**nb, "after_cell": True})
    assert code == 409 and "NVML" in body["message"]
    code, body = await call("post", "/sessions/hibernate", body={**nb, "after_cell": "yes"})
    assert code == 400
    code, body = await call("post", "/sessions/wake", body=nb)
    assert code == 409 and "only a hibernated notebook wakes" in body["message"]
    code, body = await call("put", "/sessions/schedule", body={**nb, "resume_at": "in 1h"})
    assert code == 409  # running: nothing to schedule
    code, body = await call("put", "/sessions/schedule", body={**nb, "resume_at": "noon"})
    assert code == 400
    code, body = await call("delete", "/sessions/schedule", params=nb)
    assert code == 404
    code, _ = await call("get", "/events", params={"since": "yesterday"})
    assert code == 400
    code, _ = await call("get", "/operations/{operation_id}", values={"operation_id": "abc123"})
    assert code == 404
    code, _ = await call("get", "/checkpoints", params={"path": "missing.ipynb"})
    assert code == 404
    code, _ = await call(
        "delete",
        "/checkpoints/{checkpoint_id}",
        values={"checkpoint_id": "2020-01-01T00-00-00"},
        params=nb,
    )
    assert code == 404
    code, _ = await call("get", "/report", params={"since": "x"})
    assert code == 400
    code, _ = await call("get", "/report.html", params={"until": "x"})
    assert code == 400

    # a paused notebook: no kernel, so the nullable fields are null
    code, body = await call("post", "/sessions/pause", body=nb)
    assert code == 202, body
    assert (await wait_operation(jp_fetch, body["operation"]["id"]))["outcome"] == "succeeded"
    code, status = await call("get", "/status")
    (session,) = status["sessions"]
    assert session["state"] == "paused" and session["kernel_id"] is None

    # a scheduled resume, listed in the status, then cancelled
    code, body = await call("put", "/sessions/schedule", body={**nb, "resume_at": "in 2h"})
    assert code == 200 and body["schedule"]["kind"] == "scheduled"
    code, status = await call("get", "/status")
    assert status["sessions"][0]["schedule"]["at"] == body["schedule"]["at"]
    code, _ = await call("delete", "/sessions/schedule", params=nb)
    assert code == 204

    # the accounting report, now that there is something to account for
    code, report = await call("get", "/report")
    assert report["pauses"] and report["sessions"]
    code, page = await call("get", "/report.html", params={"since": "0"})
    assert code == 200 and "<svg" in page

    code, _ = await call(
        "delete",
        "/checkpoints/{checkpoint_id}",
        values={"checkpoint_id": checkpoint["id"]},
        params=nb,
    )
    assert code == 204

    # every operation in the spec met at least one real answer
    assert contract.checked == {(path, method) for path, method, _ in operations(spec)}


async def test_a_malformed_checkpoint_id_is_a_bad_request(jp_fetch, notebook_path, spec):
    response = await jp_fetch(
        "jupyter-pause",
        "api",
        "checkpoints",
        "not-a-checkpoint-id",
        method="DELETE",
        params={"path": notebook_path},
        raise_error=False,
    )
    Contract(spec).check("/checkpoints/{checkpoint_id}", "delete", response)
    assert response.code == 400
