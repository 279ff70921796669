"""``python -m app.dcgm.serve FILE``: serve a dcgm-exporter capture at ``/metrics``, to try pull
mode without a GPU (``fleetwatch demo --pull-dcgm http://127.0.0.1:9400/metrics``).

The file is read again at each request: edit a value (say ``DCGM_FI_DEV_XID_ERRORS`` to 79)
and the next scrape sees it. A development aid, not a dcgm-exporter: it serves the text as it is.
"""

from __future__ import annotations

import argparse
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_server(path: Path, host: str, port: int) -> ThreadingHTTPServer:
    """A server answering ``GET /metrics`` with ``path``'s text (404 elsewhere, 500 when the
    file cannot be read)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            try:
                body = path.read_bytes()
            except OSError as exc:
                self.send_error(500, f"cannot read {path}: {exc.strerror}")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return ThreadingHTTPServer((host, port), Handler)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C; 2 when the file or the port cannot be used."""
    parser = argparse.ArgumentParser(prog="python -m app.dcgm.serve", description=__doc__)
    parser.add_argument("file", type=Path, help="a dcgm-exporter /metrics capture")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=_port, default=9400, help="default: 9400, dcgm-exporter's")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        why = "not a file" if args.file.exists() else "no such file"
        print(f"app.dcgm.serve: {args.file}: {why}", file=sys.stderr)
        return 2
    try:
        server = make_server(args.file, args.host, args.port)
    except OSError as exc:
        print(f"app.dcgm.serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    print(
        f"serving {args.file} at http://{args.host}:{server.server_address[1]}/metrics", flush=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
