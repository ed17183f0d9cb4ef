"""Servers from DNS (membership.py, dns_watch.py): join, leave, drain, a name that stops resolving, a flapping record.
Pure: a fake resolver and an injected clock, no DNS server and no Triton."""
from __future__ import annotations

import asyncio
import logging

import dns.exception
import dns.resolver
import pytest

from server.gateway import service
from server.gateway.balancer import Backend, Balancer
from server.gateway.config import GatewayConfig
from server.gateway.dns_watch import DnsWatch
from server.gateway.membership import Membership
from server.gateway.resolver import DnsAnswer, HostPort, LookupFailure, address_url

NAME = HostPort("triton-pods.tts.svc", 8001)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeResolver:
    """Answers what the test sets: addresses, or a failure."""

    def __init__(self) -> None:
        self.answer = DnsAnswer()

    def set(self, *addresses: str) -> None:
        self.answer = DnsAnswer(frozenset(addresses))

    def fail(self, failure: LookupFailure = LookupFailure.TIMEOUT) -> None:
        self.answer = DnsAnswer(failure=failure, detail="no answer")

    async def lookup(self, name: str) -> DnsAnswer:
        return self.answer


def watch(static: tuple[str, ...] = (), forget_after_s: float = 60.0):
    clock, resolver = Clock(), FakeResolver()
    balancer = Balancer([Backend(url) for url in static], clock=clock)
    membership = Membership(balancer, lambda url: f"http://{url.rpartition(':')[0]}:8002/metrics", forget_after_s,
                            clock)
    forgotten: list[Backend] = []

    async def on_forget(backend):
        forgotten.append(backend)

    dns = DnsWatch(resolver, membership, 5.0, lambda change: None, on_forget)
    return dns, resolver, balancer, clock, forgotten


def resolve(dns: DnsWatch) -> None:
    asyncio.run(dns.resolve(NAME))


def urls(balancer: Balancer, members_only: bool = True) -> list[str]:
    return sorted(b.url for b in balancer.backends if b.is_member or not members_only)


def test_a_server_that_joins_takes_streams_once_ready():
    dns, resolver, balancer, _, _ = watch()
    resolver.set("10.0.0.1")
    resolve(dns)
    (joined,) = balancer.backends
    assert joined.url == "10.0.0.1:8001" and joined.metrics_url == "http://10.0.0.1:8002/metrics"
    assert balancer.acquire() is None  # not ready until its readiness says so
    joined.is_ready = True
    assert balancer.acquire() is joined


def test_a_server_that_leaves_takes_no_new_stream_and_finishes_its_own():
    dns, resolver, balancer, clock, forgotten = watch(forget_after_s=30.0)
    resolver.set("10.0.0.1", "10.0.0.2")
    resolve(dns)
    for backend in balancer.backends:
        backend.is_ready = True
    leaver = next(b for b in balancer.backends if b.url == "10.0.0.1:8001")
    held = [balancer.acquire() for _ in range(2)]
    assert leaver in held and leaver.num_live == 1
    resolver.set("10.0.0.2")
    resolve(dns)
    assert urls(balancer) == ["10.0.0.2:8001"] and leaver in balancer.backends  # kept: its stream goes on
    assert all(balancer.acquire() is not leaver for _ in range(5))
    clock.now = 100.0
    resolve(dns)
    assert leaver in balancer.backends and not forgotten  # gone long enough, but a stream still runs on it
    balancer.release(leaver)
    resolve(dns)
    assert forgotten == [leaver] and leaver not in balancer.backends


def test_a_draining_server_in_dns_takes_no_new_stream():
    dns, resolver, balancer, _, _ = watch()
    resolver.set("10.0.0.1", "10.0.0.2")
    resolve(dns)
    draining, other = sorted(balancer.backends, key=lambda b: b.url)
    other.is_ready = True
    draining.is_ready = False  # SIGTERM: its readiness says not ready while its streams finish
    assert all(balancer.acquire() is other for _ in range(3))


def test_a_name_that_stops_resolving_keeps_its_servers_and_an_empty_answer_removes_them():
    dns, resolver, balancer, _, _ = watch()
    resolver.set("10.0.0.1", "10.0.0.2")
    resolve(dns)
    before = list(balancer.backends)
    for failure in LookupFailure:
        resolver.fail(failure)
        resolve(dns)
        assert urls(balancer) == ["10.0.0.1:8001", "10.0.0.2:8001"] and balancer.backends == before
    resolver.set()  # the name answers: no address (NXDOMAIN, or no records)
    resolve(dns)
    assert urls(balancer) == [] and urls(balancer, members_only=False) == ["10.0.0.1:8001", "10.0.0.2:8001"]


def test_a_flapping_record_is_the_same_server_with_its_streams_and_state():
    dns, resolver, balancer, clock, forgotten = watch(forget_after_s=30.0)
    resolver.set("10.0.0.1")
    resolve(dns)
    (server,) = balancer.backends
    server.is_ready, server.model = True, "qwen3-tts-tiny"
    assert balancer.acquire() is server
    for step in range(6):  # gone, back, gone, back, ... every 5 s
        clock.now += 5.0
        resolver.set() if step % 2 == 0 else resolver.set("10.0.0.1")
        resolve(dns)
    assert balancer.backends == [server] and server.is_member and not forgotten
    assert (server.num_live, server.num_started, server.is_ready, server.model) == (1, 1, True, "qwen3-tts-tiny")
    assert balancer.acquire() is server and server.num_live == 2


def test_a_server_gone_past_the_forget_time_comes_back_as_a_new_one():
    dns, resolver, balancer, clock, forgotten = watch(forget_after_s=30.0)
    resolver.set("10.0.0.1")
    resolve(dns)
    (first,) = balancer.backends
    resolver.set()
    resolve(dns)
    clock.now = 31.0
    resolve(dns)
    assert forgotten == [first] and balancer.backends == []
    resolver.set("10.0.0.1")
    resolve(dns)
    (second,) = balancer.backends
    assert second is not first and not second.is_ready


def test_static_servers_stay_whatever_the_name_answers():
    dns, resolver, balancer, _, _ = watch(static=("a:8001",))
    resolver.set("10.0.0.1")
    resolve(dns)
    resolver.set()
    resolve(dns)
    assert urls(balancer) == ["a:8001"]


def test_two_names_that_share_an_address_hold_it_until_both_drop_it():
    clock = Clock()
    balancer = Balancer([], clock=clock)
    membership = Membership(balancer, lambda url: None, 60.0, clock)
    membership.update("a:1", frozenset({"10.0.0.1:1"}))
    membership.update("b:1", frozenset({"10.0.0.1:1"}))
    assert not membership.update("a:1", frozenset()).left
    assert [b.url for b in membership.update("b:1", frozenset()).left] == ["10.0.0.1:1"]


def capped(max_servers: int) -> Membership:
    return Membership(Balancer([]), lambda url: None, 60.0, Clock(), max_servers=max_servers)


def member_urls(membership: Membership) -> list[str]:
    return sorted(b.url for b in membership.balancer.backends if b.is_member)


def test_a_name_adds_no_server_past_the_cap_and_says_which_once_per_change():
    membership = capped(2)
    change = membership.update("pods:1", frozenset({"10.0.0.3:1", "10.0.0.1:1", "10.0.0.2:1"}))
    assert [b.url for b in change.joined] == ["10.0.0.1:1", "10.0.0.2:1"] and change.over_cap == ("10.0.0.3:1",)
    assert member_urls(membership) == ["10.0.0.1:1", "10.0.0.2:1"]
    again = membership.update("pods:1", frozenset({"10.0.0.3:1", "10.0.0.1:1", "10.0.0.2:1"}))
    assert again.over_cap is None and again.is_empty  # the same answer: nothing new to say
    more = membership.update("pods:1", frozenset({"10.0.0.4:1", "10.0.0.3:1", "10.0.0.1:1", "10.0.0.2:1"}))
    assert more.over_cap == ("10.0.0.3:1", "10.0.0.4:1") and not more.joined
    fits = membership.update("pods:1", frozenset({"10.0.0.1:1", "10.0.0.2:1"}))
    assert fits.over_cap == () and not fits.is_empty  # every answered address fits again


def test_the_cap_keeps_the_members_first_so_membership_stays_as_it_was():
    membership = capped(2)
    membership.update("pods:1", frozenset({"10.0.0.8:1", "10.0.0.9:1"}))
    change = membership.update("pods:1", frozenset({f"10.0.0.{i}:1" for i in range(1, 10)}))
    assert not (change.joined or change.left) and len(change.over_cap) == 7  # lower addresses take no member's place
    assert member_urls(membership) == ["10.0.0.8:1", "10.0.0.9:1"]
    change = membership.update("pods:1", frozenset({f"10.0.0.{i}:1" for i in range(1, 9)}))  # .9 leaves
    assert [b.url for b in change.left] == ["10.0.0.9:1"] and [b.url for b in change.joined] == ["10.0.0.1:1"]
    assert member_urls(membership) == ["10.0.0.1:1", "10.0.0.8:1"]


def test_a_server_that_left_and_comes_back_goes_before_a_new_one_and_the_cap_spans_every_name():
    membership = capped(2)
    membership.update("a:1", frozenset({"10.0.0.5:1", "10.0.0.6:1"}))
    membership.update("a:1", frozenset({"10.0.0.5:1"}))  # .6 left; still known
    change = membership.update("b:1", frozenset({"10.0.0.1:1", "10.0.0.6:1"}))
    assert [b.url for b in change.returned] == ["10.0.0.6:1"] and not change.joined
    assert change.over_cap == ("10.0.0.1:1",) and member_urls(membership) == ["10.0.0.5:1", "10.0.0.6:1"]


def held_urls(membership: Membership) -> list[str]:
    return sorted(b.url for b in membership.balancer.backends)


def test_a_name_that_answers_new_addresses_every_round_never_makes_the_gateway_hold_more_than_the_cap():
    """A wrong or hostile DNS answer: servers that left are held until forgotten (60 s), so a cap on the answered
    addresses alone would let each round add `max_servers` more. The idle ones give their places up at once."""
    membership = capped(2)
    for round_ in range(10):
        change = membership.update("pods:1", frozenset({f"10.0.{round_}.1:1", f"10.0.{round_}.2:1"}))
        assert len(change.joined) == 2 and change.over_cap in ((), None)
        membership.forget()
        assert held_urls(membership) == [f"10.0.{round_}.1:1", f"10.0.{round_}.2:1"]


def test_a_server_that_left_keeps_its_place_while_it_holds_a_stream():
    membership = capped(2)
    membership.update("pods:1", frozenset({"10.0.0.1:1", "10.0.0.2:1"}))
    busy = next(b for b in membership.balancer.backends if b.url == "10.0.0.1:1")
    busy.num_live = 1
    change = membership.update("pods:1", frozenset({"10.0.0.3:1", "10.0.0.4:1"}))
    assert [b.url for b in change.joined] == ["10.0.0.3:1"] and change.over_cap == ("10.0.0.4:1",)
    assert [b.url for b in membership.forget()] == ["10.0.0.2:1"]  # the idle one, at once
    assert held_urls(membership) == ["10.0.0.1:1", "10.0.0.3:1"] and member_urls(membership) == ["10.0.0.3:1"]
    busy.num_live = 0  # its stream ended: its place goes to the address waiting
    change = membership.update("pods:1", frozenset({"10.0.0.3:1", "10.0.0.4:1"}))
    assert [b.url for b in change.joined] == ["10.0.0.4:1"] and change.over_cap == ()
    membership.forget()
    assert held_urls(membership) == ["10.0.0.3:1", "10.0.0.4:1"]


def test_below_the_cap_a_server_that_left_is_kept_for_its_return():
    membership = capped(3)
    membership.update("pods:1", frozenset({"10.0.0.1:1", "10.0.0.2:1"}))
    membership.update("pods:1", frozenset({"10.0.0.1:1"}))
    assert membership.forget() == () and held_urls(membership) == ["10.0.0.1:1", "10.0.0.2:1"]


def test_the_static_servers_do_not_count_against_the_cap():
    balancer = Balancer([Backend("a:1"), Backend("b:1")])
    membership = Membership(balancer, lambda url: None, 60.0, Clock(), max_servers=1)
    change = membership.update("pods:1", frozenset({"a:1", "10.0.0.1:1", "10.0.0.2:1"}))
    assert [b.url for b in change.joined] == ["10.0.0.1:1"] and change.over_cap == ("10.0.0.2:1",)


def test_the_gateway_caps_its_dns_servers_at_max_servers_and_warns_once_per_change(caplog):
    gateway = service.Gateway(GatewayConfig(tritons=(), triton_dns=("pods:8001",), max_servers=2))
    resolver = FakeResolver()
    gateway.dns.resolver = resolver
    resolver.set("10.0.0.1", "10.0.0.2", "10.0.0.3")
    for _ in range(3):
        asyncio.run(gateway.dns.resolve(gateway.dns_names[0]))
    assert [b.url for b in gateway.balancer.backends] == ["10.0.0.1:8001", "10.0.0.2:8001"]
    warnings = [r.getMessage() for r in caplog.records if "--max-servers" in r.getMessage()]
    assert warnings == ["the DNS names answer 1 server(s) past --max-servers 2; not added: 10.0.0.3:8001"]
    resolver.set("10.0.0.1", "10.0.0.2")
    asyncio.run(gateway.dns.resolve(gateway.dns_names[0]))
    assert [r.getMessage() for r in caplog.records if "--max-servers" in r.getMessage()][1:] == [
        "every server the DNS names answer fits --max-servers 2 again"]


def test_max_servers_is_a_flag_of_64_by_default_and_at_least_one():
    import argparse

    from server.gateway.cli import add_gateway_command, gateway_config
    from server.gateway.server import gateway_command

    parser = argparse.ArgumentParser()
    add_gateway_command(parser.add_subparsers(dest="command"))
    assert gateway_config(parser.parse_args(["gateway", "--triton-dns", "pods:8001"])).max_servers == 64
    config = gateway_config(parser.parse_args(["gateway", "--triton-dns", "pods:8001", "--max-servers", "8"]))
    assert config.max_servers == 8
    assert gateway_config(parser.parse_args(gateway_command(config)[3:])).max_servers == 8  # a child gateway's
    forgetful = gateway_config(parser.parse_args(["gateway", "--triton-dns", "pods:8001", "--forget-after-s", "600"]))
    assert forgetful.forget_after_s == 600.0
    assert gateway_config(parser.parse_args(gateway_command(forgetful)[3:])).forget_after_s == 600.0
    with pytest.raises(ValueError):
        GatewayConfig(tritons=(), triton_dns=("pods:8001",), max_servers=0)


@pytest.mark.parametrize("text, parsed", [("triton:8001", HostPort("triton", 8001)),
                                          ("[fd00::1]:8001", HostPort("fd00::1", 8001)),
                                          ("10.0.0.1", HostPort("10.0.0.1", 53)), ("fd00::1", HostPort("fd00::1", 53))])
def test_host_port(text, parsed):
    assert HostPort.parse(text, default_port=53) == parsed


@pytest.mark.parametrize("text", ["triton", "triton:x", "triton:0", ":8001", "[fd00::1]"])
def test_a_name_without_a_port_is_refused(text):
    with pytest.raises(ValueError):
        HostPort.parse(text)


def test_an_ipv6_address_is_bracketed_in_its_url_and_metrics_url():
    assert address_url("fd00::1", 8001) == "[fd00::1]:8001" and address_url("10.0.0.1", 8001) == "10.0.0.1:8001"
    gateway = service.Gateway(GatewayConfig(tritons=(), triton_dns=("pods:8001",), triton_metrics_port=9102))
    assert gateway._dns_metrics_url("[fd00::1]:8001") == "http://[fd00::1]:9102/metrics"


def test_the_gateway_opens_a_joiner_and_closes_a_forgotten_server(monkeypatch):
    gateway = service.Gateway(GatewayConfig(tritons=(), triton_dns=("pods.tts.svc:8001",), forget_after_s=0.001))
    resolver = FakeResolver()
    gateway.dns.resolver = resolver
    resolver.set("10.0.0.1")
    asyncio.run(gateway.dns.resolve(gateway.dns_names[0]))
    assert "10.0.0.1:8001" in gateway._router_lost
    resolver.set()
    asyncio.run(gateway.dns.resolve(gateway.dns_names[0]))  # left
    asyncio.run(asyncio.sleep(0.01))
    asyncio.run(gateway.dns.resolve(gateway.dns_names[0]))  # forgotten
    assert gateway.balancer.backends == [] and "10.0.0.1:8001" not in gateway._router_lost


def test_a_name_without_a_port_is_a_config_error():
    with pytest.raises(ValueError):
        GatewayConfig(tritons=(), triton_dns=("pods",))
    with pytest.raises(ValueError):
        GatewayConfig(tritons=())


def test_the_chart_s_gateway_command_parses_into_dns_membership():
    """The Helm chart's server groups run `voxlane gateway --triton-dns=… --metrics-port=…` (deploy/helm)."""
    import argparse

    from server.gateway.cli import add_gateway_command, gateway_config
    from tests.unit.test_helm_scaling import container, of_kind, render, values

    command = container(of_kind(render(values()), "Deployment")["vl-voxlane-gateway"])["command"]
    parser = argparse.ArgumentParser()
    add_gateway_command(parser.add_subparsers(dest="command"))
    config = gateway_config(parser.parse_args(command[1:]))
    assert config.tritons == () and [HostPort.parse(n).port for n in config.triton_dns] == [8001, 8001]
    assert config.triton_metrics_port == 8002 and config.dns_server is None


def test_without_a_dns_server_the_system_resolver_answers_from_the_hosts_file_too():
    """No `--dns-server`: the name is looked up as any program on the host looks it up (getaddrinfo), so
    `localhost` (the hosts file) answers, where a plain DNS query for it would not."""
    from server.gateway.resolver import DnsResolver
    answer = asyncio.run(DnsResolver().lookup("localhost"))
    assert answer.failure is None and "127.0.0.1" in answer.addresses


class RecordResolver:
    """dnspython's resolver as `--dns-server` uses it: each record type answers its addresses, or raises."""

    def __init__(self, **records: list[str] | Exception) -> None:
        self.records = records

    async def resolve(self, name: str, kind: str, search: bool):
        answer = self.records[kind]
        if isinstance(answer, Exception):
            raise answer
        return [type("Record", (), {"address": address})() for address in answer]


@pytest.mark.parametrize("records, addresses", [
    ({"A": ["10.0.0.1"], "AAAA": dns.exception.Timeout()}, {"10.0.0.1"}),
    ({"A": dns.resolver.NoNameservers(), "AAAA": ["fd00::1"]}, {"fd00::1"}),
    ({"A": ["10.0.0.1"], "AAAA": ["fd00::1"]}, {"10.0.0.1", "fd00::1"}),
])
def test_a_dns_server_s_answer_to_one_record_type_stands_when_the_other_fails(records, addresses):
    from server.gateway.resolver import DnsResolver
    resolver = DnsResolver("127.0.0.1:5353")
    resolver._resolver = RecordResolver(**records)
    answer = asyncio.run(resolver.lookup("pods"))
    assert answer.failure is None and answer.addresses == addresses


def test_a_dns_server_lookup_fails_only_when_both_record_types_fail():
    from server.gateway.resolver import DnsResolver
    resolver = DnsResolver("127.0.0.1:5353")
    resolver._resolver = RecordResolver(A=dns.exception.Timeout(), AAAA=dns.resolver.NoNameservers())
    assert asyncio.run(resolver.lookup("pods")).failure is LookupFailure.TIMEOUT


@pytest.mark.parametrize("records, failed_type", [
    ({"A": dns.exception.Timeout(), "AAAA": dns.resolver.NoAnswer()}, "A"),
    ({"A": dns.resolver.NXDOMAIN(), "AAAA": dns.resolver.NoNameservers()}, "AAAA"),
])
def test_one_record_type_s_failure_beside_the_other_s_empty_answer_names_the_failed_type_not_no_servers(
        records, failed_type):
    """An IPv4-only name whose A query timed out and whose AAAA query said "no records": taken as "no servers", it
    would make every server of the name leave; the answer says the A query failed, whose servers stay."""
    from server.gateway.resolver import DnsResolver
    resolver = DnsResolver("127.0.0.1:5353")
    resolver._resolver = RecordResolver(**records)
    answer = asyncio.run(resolver.lookup("pods"))
    assert answer.failure is None and not answer.addresses and answer.failed_types == (failed_type,)


@pytest.mark.parametrize("before, failed_type, after", [
    (("10.0.0.1", "10.0.0.2"), "A", ["10.0.0.1:8001", "10.0.0.2:8001"]),  # IPv4 only: its A query lost, all stay
    (("10.0.0.1", "fd00::1"), "AAAA", ["[fd00::1]:8001"]),  # dual stack: the A records went, the AAAA one stays
], ids=["ipv4_only_keeps_its_servers", "dual_stack_loses_its_ipv4_servers"])
def test_a_failed_record_type_beside_the_other_s_empty_answer_keeps_only_its_own_servers(before, failed_type, after):
    dns, resolver, balancer, _, _ = watch()
    resolver.set(*before)
    resolve(dns)
    resolver.answer = DnsAnswer(frozenset(), detail="timed out", failed_types=(failed_type,))
    resolve(dns)
    assert urls(balancer) == after


def test_an_empty_answer_of_both_record_types_is_no_servers_not_a_failure():
    from server.gateway.resolver import DnsResolver
    resolver = DnsResolver("127.0.0.1:5353")
    resolver._resolver = RecordResolver(A=dns.resolver.NoAnswer(), AAAA=dns.resolver.NoAnswer())
    answer = asyncio.run(resolver.lookup("pods"))
    assert answer.failure is None and not answer.addresses


@pytest.mark.parametrize("settings, named", [(dict(forget_after_s=-1.0), "--forget-after-s -1"),
                                             (dict(dns_interval_s=float("nan")), "--dns-interval-s nan"),
                                             (dict(down_s=0.0), "down_s 0")])
def test_a_timeout_that_is_not_positive_is_refused_by_its_name(settings, named):
    with pytest.raises(ValueError, match=named):
        GatewayConfig(tritons=(), triton_dns=("pods:8001",), **settings)


def test_a_record_type_that_fails_beside_the_other_keeps_its_servers_and_says_so_once(caplog):
    """A dual-stack name whose AAAA query times out while its A query answers: its IPv6 server did not leave DNS, so
    it keeps taking streams; the A records still follow their answer."""
    dns, resolver, balancer, _, _ = watch()
    resolver.set("10.0.0.1", "fd00::1")
    resolve(dns)
    assert urls(balancer) == ["10.0.0.1:8001", "[fd00::1]:8001"]
    with caplog.at_level(logging.WARNING, logger="voxlane.gateway"):
        resolver.answer = DnsAnswer(frozenset({"10.0.0.2"}), detail="timed out", failed_types=("AAAA",))
        resolve(dns)
        resolve(dns)
    assert urls(balancer) == ["10.0.0.2:8001", "[fd00::1]:8001"]  # the A records moved; the AAAA one stays
    assert sum("AAAA lookup failed" in r.getMessage() for r in caplog.records) == 1
    resolver.set("10.0.0.2")  # both types answer again: the IPv6 server has left
    resolve(dns)
    assert urls(balancer) == ["10.0.0.2:8001"]


def test_the_answer_names_the_record_type_that_failed_beside_the_other():
    from server.gateway.resolver import DnsResolver
    resolver = DnsResolver("127.0.0.1:5353")
    resolver._resolver = RecordResolver(A=["10.0.0.1"], AAAA=dns.exception.Timeout())
    answer = asyncio.run(resolver.lookup("pods"))
    assert answer.addresses == {"10.0.0.1"} and answer.failed_types == ("AAAA",)
    resolver._resolver = RecordResolver(A=["10.0.0.1"], AAAA=dns.resolver.NoAnswer())
    assert asyncio.run(resolver.lookup("pods")).failed_types == ()
