"""Pure parsers of ``/proc/net`` counter files; every value is an exact Python int.

* ``/proc/net/snmp`` and ``/proc/net/netstat``: pairs of lines, a header naming the counters
  and a value line with the same prefix (``Tcp: RtoAlgorithm RtoMin …`` / ``Tcp: 1 200 …``),
  written by net/ipv4/proc.c. Some values are signed (``Tcp: MaxConn`` is ``-1``).
* ``/proc/net/rpc/nfs`` (net/sunrpc/stats.c ``rpc_proc_show``): ``net`` packets, UDP, TCP, TCP
  connections; ``rpc`` calls, retransmissions, authentication refreshes; then one
  ``procN <count> <calls…>`` line per NFS version with the calls of each procedure.
"""

from __future__ import annotations

#: NFSv2 procedures in number order (RFC 1094).
NFS2_PROCEDURES = (
    "null", "getattr", "setattr", "root", "lookup", "readlink", "read", "writecache", "write",
    "create", "remove", "rename", "link", "symlink", "mkdir", "rmdir", "readdir", "statfs",
)  # fmt: skip
#: NFSv3 procedures in number order (RFC 1813).
NFS3_PROCEDURES = (
    "null", "getattr", "setattr", "lookup", "access", "readlink", "read", "write", "create",
    "mkdir", "symlink", "mknod", "remove", "rmdir", "rename", "link", "readdir", "readdirplus",
    "fsstat", "fsinfo", "pathconf", "commit",
)  # fmt: skip
#: The Linux NFSv4 client's procedures in table order (``NFSPROC4_CLNT_*``), as its
#: ``mountstats`` per-op lines list them (kernel 4.18); later kernels append to the end.
NFS4_PROCEDURES = (
    "null", "read", "write", "commit", "open", "open_confirm", "open_noattr", "open_downgrade",
    "close", "setattr", "fsinfo", "renew", "setclientid", "setclientid_confirm", "lock",
    "lockt", "locku", "access", "getattr", "lookup", "lookup_root", "remove", "rename", "link",
    "symlink", "create", "pathconf", "statfs", "readlink", "readdir", "server_caps",
    "delegreturn", "getacl", "setacl", "fs_locations", "release_lockowner", "secinfo",
    "fsid_present", "exchange_id", "create_session", "destroy_session", "sequence",
    "get_lease_time", "reclaim_complete", "layoutget", "getdeviceinfo", "layoutcommit",
    "layoutreturn", "secinfo_no_name", "test_stateid", "free_stateid", "getdevicelist",
    "bind_conn_to_session", "destroy_clientid", "seek", "allocate", "deallocate",
    "layoutstats", "clone", "copy", "lookupp",
)  # fmt: skip
_PROCEDURES = {"proc2": NFS2_PROCEDURES, "proc3": NFS3_PROCEDURES, "proc4": NFS4_PROCEDURES}
_RPC_NFS_FIELDS = {
    "net": ("packets", "udp_packets", "tcp_packets", "tcp_connections"),
    "rpc": ("calls", "retransmissions", "auth_refreshes"),
}


def _ints(values: list[str]) -> list[int] | None:
    try:
        return [int(v) for v in values]
    except ValueError:
        return None


def parse_net_pairs(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/snmp`` or ``/proc/net/netstat`` text as ``{"Tcp": {"RtoMin": 200, …}, …}``.

    A header is the first line of a prefix, its values the next one with the same prefix; when
    they differ in length (a kernel mid-change) only the named values are kept.
    """
    tables: dict[str, dict[str, int]] = {}
    header: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        prefix, _, rest = line.partition(":")
        if not rest:
            continue
        fields = rest.split()
        if header is not None and header[0] == prefix:
            values = _ints(fields)
            if values is not None:
                tables[prefix] = dict(zip(header[1], values, strict=False))
            header = None
        else:
            header = (prefix, fields)
    return tables


def parse_rpc_nfs(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/rpc/nfs`` text as ``{"net": {...}, "rpc": {"calls", "retransmissions",
    "auth_refreshes"}, "proc3": {"getattr": …}, …}``.

    ``procN`` lines are keyed by procedure name (:data:`NFS3_PROCEDURES` …); a procedure
    beyond the known names is ``proc_<number>``. The leading count of a ``procN`` line is not a
    counter and is left out.
    """
    stats: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        values = _ints(parts[1:])
        if values is None:
            continue
        label = parts[0]
        if label in _RPC_NFS_FIELDS:
            stats[label] = dict(zip(_RPC_NFS_FIELDS[label], values, strict=False))
        elif label.startswith("proc") and values:
            names = _PROCEDURES.get(label, ())
            calls = values[1 : 1 + values[0]]
            stats[label] = {
                names[i] if i < len(names) else f"proc_{i}": count for i, count in enumerate(calls)
            }
    return stats
