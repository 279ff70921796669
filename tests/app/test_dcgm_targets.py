"""The endpoints to scrape: the static URL list and a Prometheus file_sd-style JSON or YAML
file, errors naming the file, group and entry; the capture server of the demo."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.config import SettingsError, load_settings
from app.dcgm.serve import make_server
from app.dcgm.targets import Target, TargetsError, merge, read_file


def test_a_file_sd_yaml_file_gives_urls_hostnames_and_node_labels(tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(
        "- targets: ['gpu-node-01:9400', 'gpu-node-02:9400']\n"
        "  labels: {cluster: a, rack: r07}\n"
        "- targets: ['10.0.0.7:9400']\n"
        "  labels: {hostname: gpu-node-07, __scheme__: https, __metrics_path__: /dcgm}\n"
        "- targets: ['http://gpu-node-09:9400/metrics']\n"
    )
    assert read_file(path) == [
        Target("http://gpu-node-01:9400/metrics", None, {"cluster": "a", "rack": "r07"}),
        Target("http://gpu-node-02:9400/metrics", None, {"cluster": "a", "rack": "r07"}),
        Target("https://10.0.0.7:9400/dcgm", "gpu-node-07", {}),
        Target("http://gpu-node-09:9400/metrics", None, {}),
    ]


def test_a_file_sd_json_file_reads_the_same(tmp_path: Path) -> None:
    path = tmp_path / "targets.json"
    path.write_text('[{"targets": ["gpu-node-01:9400"], "labels": {"cluster": "a"}}]')
    assert read_file(path) == [Target("http://gpu-node-01:9400/metrics", None, {"cluster": "a"})]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{targets: [a:1]}", "expected a list of {targets: [...], labels: {...}} groups"),
        ("- labels: {}\n", "group 1: expected {targets: [host:port, ...], labels: {...}}"),
        (
            "- targets: [a:1]\n  labels: {hostname: 'bad host'}\n",
            "group 1: hostname 'bad host' is not a host name",
        ),
        ("- targets: ['a:x']\n", "group 1: 'http://a:x/metrics' has a port that is not a number"),
        ("- targets: [a:1]\n- targets: [7]\n", "group 2: a target must be host:port or a URL"),
        ("[1, 2", "neither JSON nor YAML"),
        # An IPv6 address without its closing bracket: urllib raises a bare ValueError.
        ("- targets: ['[::1:9400']\n", "group 1: 'http://[::1:9400/metrics' is not an http://"),
        (
            f"- targets: [a:1]\n  labels: {{hostname: {'a' * 300}}}\n",
            f"group 1: hostname '{'a' * 300}' is not a host name",
        ),
    ],
)
def test_a_bad_file_names_the_group_and_entry(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text(text)
    with pytest.raises(TargetsError) as caught:
        read_file(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert error in str(caught.value)


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TargetsError, match="cannot be read"):
        read_file(tmp_path / "nope.yaml")


def test_merge_keeps_the_first_of_each_url() -> None:
    a = Target("http://n1:9400/metrics")
    b = Target("http://n1:9400/metrics", "n1", {"x": "1"})
    assert merge([a], [b, Target("http://n2:9400/metrics")]) == [
        a,
        Target("http://n2:9400/metrics"),
    ]


def test_the_static_setting_takes_plain_or_json_lists_and_names_a_bad_url() -> None:
    plain = load_settings(dcgm_endpoints="http://n1:9400/metrics  http://n2:9400/metrics")
    assert plain.dcgm_endpoints == ["http://n1:9400/metrics", "http://n2:9400/metrics"]
    assert load_settings(dcgm_endpoints='["http://n1:9400/metrics"]').dcgm_endpoints == [
        "http://n1:9400/metrics"
    ]
    with pytest.raises(SettingsError, match="FLEETWATCH_DCGM_ENDPOINTS: 'n1:9400' is not an"):
        load_settings(dcgm_endpoints="n1:9400")
    with pytest.raises(SettingsError, match="'http://\\[::1:9400/metrics' is not an http://"):
        load_settings(dcgm_endpoints="http://[::1:9400/metrics")


def test_the_demo_refuses_a_pull_url_that_is_not_http(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "demo",
            "--pull-dcgm",
            "gpu-node-01:9400",
            "--database-url",
            f"sqlite:///{tmp_path / 'x.db'}",
        ],
    )
    assert result.exit_code == 2
    assert "--pull-dcgm: 'gpu-node-01:9400' is not an http:// or https:// URL" in result.output


def test_the_capture_server_serves_the_file_as_it_is_now(tmp_path: Path) -> None:
    capture = tmp_path / "node.prom"
    capture.write_text('DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a"} 0\n')
    server = make_server(capture, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert httpx.get(f"{base}/metrics").text.endswith("} 0\n")
        capture.write_text('DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-a"} 79\n')
        got = httpx.get(f"{base}/metrics")
        assert (got.status_code, got.text.endswith("} 79\n")) == (200, True)
        assert httpx.get(f"{base}/other").status_code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_the_docs_mapping_table_lists_exactly_the_fields_taken() -> None:
    from app.config import PROJECT_ROOT
    from app.dcgm import fields

    text = (PROJECT_ROOT / "docs" / "dcgm-pull.md").read_text()
    table = text.split("## Field mapping", 1)[1].split("### Not taken", 1)[0]
    documented = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `DCGM_")}
    taken = {f.dcgm for f in fields.SAMPLE_FIELDS} | {fields.FB_TOTAL, fields.XID_LAST}
    assert documented == taken | fields.XID_COUNTS


def test_a_password_in_a_url_is_hidden_wherever_the_url_is_shown() -> None:
    from app.dcgm.targets import hide_password, shown_url

    assert shown_url("http://fw:s3cret@gpu-node-01:9400/metrics") == (
        "http://fw:***@gpu-node-01:9400/metrics"
    )
    assert shown_url("https://[::1]:9400/metrics") == "https://[::1]:9400/metrics"
    assert hide_password(
        "InvalidURL: s3cret in http://fw:s3cret@h/metrics", "http://fw:s3cret@h/metrics"
    ) == ("InvalidURL: *** in http://fw:***@h/metrics")
    with pytest.raises(SettingsError) as caught:
        load_settings(dcgm_endpoints="http://fw:s3cret@n1:99999/metrics")
    assert "s3cret" not in str(caught.value) and "'http://fw:***@n1:99999/metrics'" in str(
        caught.value
    )


def test_the_capture_server_names_a_bad_port_or_a_directory_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.dcgm.serve import main

    capture = tmp_path / "page.prom"
    capture.write_text("DCGM_FI_DEV_GPU_TEMP 1\n")
    with pytest.raises(SystemExit) as caught:
        main([str(capture), "--port", "70000"])
    assert caught.value.code == 2
    assert "argument --port: expected a port number 0-65535, got '70000'" in capsys.readouterr().err
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"app.dcgm.serve: {tmp_path}: not a file\n"


def test_a_url_longer_than_the_endpoint_column_is_refused_up_front() -> None:
    # Postgres' varchar(2048) would refuse its row at every scrape, its failure unrecorded.
    long = "http://gpu-node-01:9400/" + "m" * 2048
    with pytest.raises(SettingsError, match="is longer than 2048 characters"):
        load_settings(dcgm_endpoints=long)
