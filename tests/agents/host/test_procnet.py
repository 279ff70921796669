"""/proc/net/snmp, /proc/net/netstat and /proc/net/rpc/nfs parse into exact ints."""

from __future__ import annotations

from agents.host.procnet import NFS3_PROCEDURES, parse_net_pairs, parse_rpc_nfs
from tests.agents.host.fakefs import proc_fixture


def test_netstat_header_and_value_lines_pair_up_by_prefix() -> None:
    tables = parse_net_pairs(proc_fixture("proc-net-netstat.txt"))
    assert {name: len(values) for name, values in tables.items()} == {
        "TcpExt": 125,
        "IpExt": 18,
        "MPTcpExt": 42,
    }
    tcp = tables["TcpExt"]
    assert (tcp["SyncookiesFailed"], tcp["TW"], tcp["DelayedACKs"]) == (13, 5732978, 6314767)
    assert (tcp["TCPHPHits"], tcp["ListenOverflows"]) == (171638629, 0)
    ip = tables["IpExt"]
    assert (ip["InOctets"], ip["OutOctets"], ip["InCEPkts"]) == (1592028432532, 4490491570712, 650)
    assert tables["MPTcpExt"]["MPCapableFallbackACK"] == 145


def test_snmp_keeps_signed_values_and_a_last_line_without_newline() -> None:
    tables = parse_net_pairs(proc_fixture("proc-net-snmp.txt"))
    assert list(tables) == ["Ip", "Icmp", "IcmpMsg", "Tcp", "Udp", "UdpLite"]
    assert tables["Tcp"] == {
        "RtoAlgorithm": 1, "RtoMin": 200, "RtoMax": 120000, "MaxConn": -1,
        "ActiveOpens": 6115962, "PassiveOpens": 5471540, "AttemptFails": 60896,
        "EstabResets": 302714, "CurrEstab": 382, "InSegs": 380609877, "OutSegs": 419685271,
        "RetransSegs": 73095, "InErrs": 128, "OutRsts": 701177, "InCsumErrors": 0,
    }  # fmt: skip
    assert (tables["Ip"]["InReceives"], tables["Udp"]["OutDatagrams"]) == (821820750, 1094611811)
    assert set(tables["UdpLite"].values()) == {0} and len(tables["UdpLite"]) == 9


def test_the_rpc_nfs_client_file_gives_retransmissions_and_calls_per_procedure() -> None:
    stats = parse_rpc_nfs(proc_fixture("proc-net-rpc-nfs-client.txt"))
    assert stats["net"] == {
        "packets": 70,
        "udp_packets": 70,
        "tcp_packets": 69,
        "tcp_connections": 45,
    }
    assert stats["rpc"] == {
        "calls": 1218785755,
        "retransmissions": 374636,
        "auth_refreshes": 1218815394,
    }
    assert list(stats["proc3"]) == list(NFS3_PROCEDURES)
    assert (stats["proc3"]["getattr"], stats["proc3"]["commit"]) == (1061909262, 23729)
    assert (len(stats["proc2"]), stats["proc2"]["statfs"]) == (18, 82)
    assert (len(stats["proc4"]), stats["proc4"]["null"], stats["proc4"]["layoutreturn"]) == (
        48,
        98,
        0,
    )


def test_procedures_beyond_the_known_names_are_numbered() -> None:
    stats = parse_rpc_nfs("proc3 24 " + " ".join(str(n) for n in range(24)) + "\nbogus x y\n")
    assert len(stats["proc3"]) == 24
    assert (stats["proc3"]["commit"], stats["proc3"]["proc_22"], stats["proc3"]["proc_23"]) == (
        21,
        22,
        23,
    )
    assert "bogus" not in stats
