"""Property: whatever a client sends, every endpoint answers 2xx or 4xx, and
a 4xx carries a JSON error body that says what was wrong (never a 500)."""

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from datetime import date, datetime

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jupyter_pause.client import API, LocalServer

from .helpers import server_env, write_notebooks

NB = "nb.ipynb"

SETTINGS = settings(
    max_examples=60,
    deadline=None,  # a loaded 2-core machine; timings are not the property
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    root = write_notebooks(tmp / "root", NB)
    with LocalServer(root, tmp / "state", env=server_env(tmp)) as server:
        server.start()
        yield server


def call(server, method: str, endpoint: str, body: bytes | None = None, query=None):
    """One raw request; returns (status, body bytes, content type)."""
    url = server.url + API + endpoint
    if query:
        url += "?" + urllib.parse.urlencode(query)
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Authorization", f"token {server.token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def assert_answered(status: int, body: bytes, *, json_errors: bool = True) -> None:
    assert status < 500, (status, body[:300])
    if 400 <= status < 500 and json_errors:
        error = json.loads(body, parse_constant=_no_constants)
        assert isinstance(error.get("message"), str) and error["message"], body[:300]
    if 200 <= status < 300 and body and json_errors:
        json.loads(body, parse_constant=_no_constants)  # strict JSON: no NaN, no Infinity


def _no_constants(name):
    raise AssertionError(f"{name} is not JSON")


# ------------------------------------------------------------------ strategies

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
paths = st.one_of(
    st.sampled_from([NB, "/" + NB, "../" + NB, "", " ", "missing.ipynb", "a/../../b", "\x00"]),
    st.text(max_size=40),
    json_values,
)
numbers = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-1e400", "9" * 40, "-" + "9" * 40, ""]),
    st.integers().map(str),
    st.floats().map(repr),
    st.text(max_size=20),
)
nested = st.integers(min_value=1, max_value=200_000).map(lambda n: "[" * n + "]" * n)

#: times as people write them, and as they should not: calendar edges, zones far
#: from UTC, numbers beyond what a float or a calendar holds
time_texts = st.one_of(
    st.sampled_from(
        [
            "0001-01-01",
            "0001-01-01T00:00:00+14:00",
            "0000-01-01",
            "9999-12-31",
            "9999-12-31T23:59:59-23:59",
            "2026-02-30",
            "08:45",
            "tomorrow 08:45",
            "monday 08:45",
            "today 00:00",
            "in 2h",
            "+30m",
            "in " + "9" * 400 + "h",
            "1e400",
            "-1e400",
            "nan",
        ]
    ),
    st.dates().map(date.isoformat),
    st.datetimes(timezones=st.none() | st.timezones()).map(datetime.isoformat),
    st.text(max_size=20),
)
time_numbers = st.one_of(
    st.sampled_from([10**400, -(10**400), 0, -1, 253402300799, 253402300800, 1e300, -1e300]),
    st.integers(),
    st.floats(),
)
times = st.one_of(time_texts, time_numbers)
query_times = st.one_of(time_texts, time_numbers.map(str), st.floats().map(repr))


@st.composite
def bodies(draw):
    """A request body: a JSON object with plausible and implausible fields,
    any JSON value, deeply nested arrays, or bytes that are not JSON."""
    kind = draw(st.sampled_from(["object", "value", "nested", "bytes"]))
    if kind == "object":
        body = {"path": draw(paths)}
        fields = ("force", "after_cell", "checkpoint_id", "resume_at", "operation_id")
        for name in (*fields, "recovered", "lost"):
            if draw(st.booleans()):
                body[name] = draw(json_values)
        return json.dumps(body).encode()
    if kind == "value":
        return json.dumps(draw(json_values)).encode()
    if kind == "nested":
        return ('{"path": ' + draw(nested) + "}").encode()
    return draw(st.binary(max_size=200))


# ------------------------------------------------------------------- properties


@pytest.mark.parametrize(
    "verb", ["pause", "resume", "checkpoint", "checkpointed", "restored", "postpone"]
)
@SETTINGS
@given(body=bodies())
def test_posts_answer_every_body(server, verb, body):
    assert_answered(*call(server, "POST", f"sessions/{verb}", body)[:2])


@SETTINGS
@given(body=bodies(), path=st.one_of(st.none(), st.text(max_size=30)))
def test_schedules_answer_every_body_and_query(server, body, path):
    assert_answered(*call(server, "PUT", "sessions/schedule", body)[:2])
    query = None if path is None else {"path": path}
    status, answer, _ = call(server, "DELETE", "sessions/schedule", query=query)
    assert_answered(status, answer, json_errors=status != 204)


@pytest.mark.parametrize(
    "method, endpoint", [("POST", "sessions/pause"), ("PUT", "sessions/schedule")]
)
@SETTINGS
@given(resume_at=times)
@example(resume_at="0001-01-01")  # ValueError: year 0 is out of range
@example(resume_at=10**400)  # OverflowError: int too large to convert to float
def test_every_resume_time_is_answered(server, method, endpoint, resume_at):
    """A time that cannot be used is refused with 400 and says what is wrong
    with it: out of range, not in the future, more than 31 days ahead."""
    status, body, _ = call(
        server, method, endpoint, json.dumps({"path": NB, "resume_at": resume_at}).encode()
    )
    assert_answered(status, body)
    if status == 400:
        assert "resume time" in json.loads(body)["message"], body[:300]


@pytest.mark.parametrize(
    "endpoint, fields", [("events", ("since",)), ("report", ("since", "until"))]
)
@SETTINGS
@given(data=st.data())
def test_every_time_in_a_query_is_answered(server, endpoint, fields, data):
    query = {field: data.draw(query_times, label=field) for field in fields}
    assert_answered(*call(server, "GET", endpoint, query=query)[:2])


@SETTINGS
@given(since=numbers, after_id=numbers, path=st.one_of(st.none(), st.text(max_size=30)))
def test_events_answer_every_query(server, since, after_id, path):
    query = {"since": since, "after_id": after_id}
    if path is not None:
        query["path"] = path
    assert_answered(*call(server, "GET", "events", query=query)[:2])


@pytest.mark.parametrize("endpoint", ["report", "report.html"])
@SETTINGS
@given(since=numbers, until=numbers)
def test_reports_answer_every_period(server, endpoint, since, until):
    status, body, _ = call(server, "GET", endpoint, query={"since": since, "until": until})
    assert_answered(status, body, json_errors=endpoint == "report")
    if endpoint == "report" and status == 200:
        report = json.loads(body)
        _finite(report)


def _finite(data):
    if isinstance(data, float):
        assert math.isfinite(data)
    elif isinstance(data, dict):
        for value in data.values():
            _finite(value)
    elif isinstance(data, list):
        for value in data:
            _finite(value)


@SETTINGS
@given(
    path=st.one_of(st.none(), st.text(max_size=40)),
    checkpoint_id=st.text(
        alphabet=st.characters(codec="ascii", exclude_characters="/?#%"), min_size=1, max_size=40
    ),
)
def test_checkpoint_endpoints_answer_every_path_and_id(server, path, checkpoint_id):
    query = {"path": path} if path is not None else None
    assert_answered(*call(server, "GET", "checkpoints", query=query)[:2])
    status, body, _ = call(
        server, "DELETE", "checkpoints/" + urllib.parse.quote(checkpoint_id), query=query
    )
    # an id the route does not match is Jupyter's own 404 page
    assert status < 500, (status, body[:300])
    if status != 404:
        assert_answered(status, body)


@SETTINGS
@given(operation_id=st.text(alphabet="0123456789abcdef", min_size=1, max_size=64))
def test_reads_answer(server, operation_id):
    assert_answered(*call(server, "GET", f"operations/{operation_id}")[:2])
    assert_answered(*call(server, "GET", "status")[:2])
    assert_answered(*call(server, "GET", "activity")[:2])
