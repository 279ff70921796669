"""The client commands without a working server: an unreachable one is one line naming it
(exit 5 for health, 1 otherwise), a bad URL or option is named (health exits 5, never 2, its
"unhealthy"), the token travels as a bearer header, an answer that is not Fleetwatch's is
named; shell completion; the database commands keep their names; the table layout."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from typer.testing import CliRunner

from app.cli import cli
from app.client_cli.output import Column, table_lines
from tests.app.test_client_cli import flat, run
from tests.live_server import LiveServer, free_port


def test_an_unreachable_server_is_one_line_naming_it_exit_5_for_health_1_otherwise() -> None:
    closed = f"http://127.0.0.1:{free_port()}"

    health = run(closed, "health", "--node", "gpu-ok")
    nodes = run(closed, "nodes")
    silence = run(closed, "silence", "--match", "a=b", "--for", "1h", "--comment", "x")

    assert health.exit_code == 5 and nodes.exit_code == 1 and silence.exit_code == 1
    for result in (health, nodes, silence):
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"fleetwatch: cannot reach {closed}: ")
        assert "Connect" in line or "refused" in line


def test_a_bad_server_url_or_option_is_named_and_health_says_5_not_2() -> None:
    nodes = run("ftp://fleet", "nodes")
    health = run("not a url", "health", "--node", "x")
    typo = run("http://127.0.0.1:1", "health", "--nod", "x")
    token = run("http://127.0.0.1:1", "nodes", "--token", "two words")

    assert nodes.exit_code == 2
    assert "'--server'" in flat(nodes.stderr) and "http:// or https:// URL" in flat(nodes.stderr)
    assert health.exit_code == 5 and "'--server'" in flat(health.stderr)
    assert typo.exit_code == 5 and "No such option: --nod" in flat(typo.stderr)
    assert token.exit_code == 2 and "'--token'" in flat(token.stderr)
    assert "two words" not in token.stderr


class _Recorder(BaseHTTPRequestHandler):
    """A web server that is not Fleetwatch: answers every GET with an HTML page (keeping the
    headers it was sent) and every POST with a redirect to https."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        _Recorder.seen.append(dict(self.headers))
        body = b"<html>a login page</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.send_response(301)
        self.send_header("Location", "https://fleetwatch.example/api/v1/silences")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        """Quiet."""


def test_the_token_goes_as_a_bearer_header_and_a_wrong_server_is_named() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        result = run(url, "alerts", FLEETWATCH_API_TOKEN="fwa_s3cret-token")
        moved = run(url, "silence", "--match", "a=b", "--for", "1h", "--comment", "x")
    finally:
        httpd.shutdown()
        httpd.server_close()

    assert _Recorder.seen[-1]["Authorization"] == "Bearer fwa_s3cret-token"
    assert result.exit_code == 1
    assert result.stderr == (
        f"fleetwatch: {url} answered GET /api/v1/alerts with something other than JSON: "
        "is it a Fleetwatch server?\n"
    )
    assert moved.exit_code == 1
    assert moved.stderr == (
        "fleetwatch: the server redirects POST /api/v1/silences to "
        "https://fleetwatch.example/api/v1/silences: give that base URL as --server\n"
    )


def test_shell_completion_is_on_for_the_fleetwatch_command() -> None:
    result = CliRunner().invoke(cli, ["--show-completion", "bash"], prog_name="fleetwatch")

    assert result.exit_code == 0, result.output
    assert "complete -o default -F _fleetwatch_completion fleetwatch" in result.stdout


def test_the_database_commands_keep_their_names_beside_the_client_ones() -> None:
    listing = CliRunner().invoke(cli, ["--help"], env={"COLUMNS": "200"})
    names = set(re.findall(r"│ (\w[\w-]*) ", listing.stdout))

    assert {"node", "nodes", "health", "silence", "ack", "alerts", "incidents"} <= names
    assert {"lifecycle", "maintenance", "token", "rules"} <= names
    assert CliRunner().invoke(cli, ["node", "retire", "--help"]).exit_code == 0


def test_table_cells_are_flattened_aligned_and_cut_to_their_column_and_the_terminal() -> None:
    lines = table_lines(
        [Column("NAME", 6), Column("STATE", 9, coloured=True), Column("TEXT", 40)],
        [
            ["gpu-node-07", "unhealthy", "line one\nline two and a much longer tail"],
            ["n1", "healthy", None],
        ],
        width=45,
    )

    assert lines == [
        "NAME    STATE      TEXT",
        "gpu-n…  unhealthy  line one line two and a m…",
        "n1      healthy    -",
    ]
    assert max(len(line) for line in lines) == 45
    coloured = table_lines([Column("STATE", 9, coloured=True)], [["unhealthy"]], colour=True)
    assert "\x1b[31munhealthy" in coloured[1]


def test_a_404_from_a_wrong_server_path_is_no_answer_not_an_unknown_node(
    server: LiveServer,
) -> None:
    """Only the server's own "no node named …" exits 4: a --server with a wrong path (any
    other 404) exits 5, so a job prolog never reads it as a missing node."""
    wrong = run(f"{server.url}/nothere", "health", "--node", "gpu-01")
    assert wrong.exit_code == 5, wrong.stderr
    missing = run(server.url, "health", "--node", "gpu-01")
    assert missing.exit_code == 4 and "no node named 'gpu-01'" in missing.stderr


def test_an_empty_node_is_a_bad_option_not_this_machine() -> None:
    # `fleetwatch health --node "$SLURMD_NODENAME"` with the variable unset must not quietly
    # answer for the machine running the script.
    for empty in ("", "  "):
        result = run("http://127.0.0.1:1", "health", "--node", empty)
        assert result.exit_code == 5
        assert result.stderr == (
            "fleetwatch: --node is empty: give a hostname, or leave --node out for this machine's\n"
        )
