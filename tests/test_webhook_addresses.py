"""The address screen (SSRF): every non-public form is refused, literal or by name.

Names resolve through a test resolver (a dict), never through DNS; the
refusals happen in ``vet()``, before any socket exists. The sender-level
twin of this table (tests/test_webhook_sender.py) proves that no connection
is attempted.
"""

from __future__ import annotations

import ipaddress

import pytest

from django_ultimate_jobs.webhooks.addresses import (
    address_class,
    display_url,
    parse_url,
    vet,
)
from django_ultimate_jobs.webhooks.errors import (
    WebhookDeliveryFailed,
    WebhookEndpointInvalid,
)

# (how the host is written in a URL, the class it must be refused as).
REFUSED_LITERALS = [
    ("127.0.0.1", "loopback"),
    ("127.1", "loopback"),
    ("2130706433", "loopback"),
    ("0x7f000001", "loopback"),
    ("0177.0.0.1", "loopback"),
    ("0x7f.0.0.1", "loopback"),
    ("[::1]", "loopback"),
    ("[::ffff:127.0.0.1]", "loopback"),
    ("[::ffff:7f00:1]", "loopback"),
    ("[::127.0.0.1]", "loopback"),
    ("[64:ff9b::7f00:1]", "loopback"),
    ("[2002:7f00:1::1]", "loopback"),
    ("0.0.0.0", "unspecified"),
    ("0", "unspecified"),
    ("[::]", "unspecified"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("[::ffff:10.0.0.1]", "private"),
    ("[64:ff9b::c0a8:101]", "private"),
    ("169.254.169.254", "metadata"),
    ("[::ffff:169.254.169.254]", "metadata"),
    ("[64:ff9b::a9fe:a9fe]", "metadata"),
    ("169.254.1.1", "link-local"),
    ("[fe80::1]", "link-local"),
    ("100.64.0.1", "cgnat"),
    ("100.100.100.200", "cgnat"),
    ("[::ffff:100.64.0.1]", "cgnat"),
    ("[fc00::1]", "ula"),
    ("[fd00:ec2::254]", "ula"),
    ("[64:ff9b:1::a00:1]", "nat64"),
    ("224.0.0.1", "multicast"),
    ("[ff02::1]", "multicast"),
    ("255.255.255.255", "reserved"),
    ("240.0.0.1", "reserved"),
    ("192.0.2.1", "documentation"),
    ("[2001:db8::1]", "documentation"),
    # Teredo: judged by the client address it carries (10.0.0.1 here).
    ("[2001:0:4136:e378:8000:63bf:f5ff:fffe]", "private"),
]


def _name_resolver(table):
    def resolve(host, port):
        return table[host]

    return resolve


def _address(host: str) -> str:
    return host.strip("[]")


@pytest.mark.parametrize(
    ("host", "kind"), REFUSED_LITERALS, ids=[h for h, _ in REFUSED_LITERALS]
)
def test_a_literal_non_public_address_is_refused_by_class(host, kind):
    target = parse_url(f"https://{host}/hook", allow_http=False)

    def no_dns(host, port):
        raise AssertionError("a literal address was resolved")

    with pytest.raises(WebhookEndpointInvalid) as caught:
        vet(target, resolve=no_dns, url=f"https://{host}/hook")
    assert caught.value.meta["address_class"] == kind
    # The class is named; the address itself never is.
    assert _address(host) not in caught.value.render()


# Names resolving to each literal above that the resolver can answer as text.
BY_NAME = [
    (str(parse_url(f"https://{host}/", allow_http=False).literal), kind)
    for host, kind in REFUSED_LITERALS
]


@pytest.mark.parametrize(("address", "kind"), BY_NAME, ids=[a for a, _ in BY_NAME])
def test_a_name_resolving_to_a_non_public_address_is_refused(address, kind):
    resolve = _name_resolver({"hooks.example.test": [address]})
    target = parse_url("https://hooks.example.test/hook", allow_http=False)
    with pytest.raises(WebhookEndpointInvalid) as caught:
        vet(target, resolve=resolve, url="https://hooks.example.test/hook")
    assert caught.value.meta["address_class"] == kind


def test_every_resolved_address_is_checked_not_only_the_first():
    resolve = _name_resolver(
        {"mixed.example.test": ["93.184.216.34", "2606:2800:220:1::1", "10.1.2.3"]}
    )
    target = parse_url("https://mixed.example.test/", allow_http=False)
    with pytest.raises(WebhookEndpointInvalid) as caught:
        vet(target, resolve=resolve)
    assert caught.value.meta["address_class"] == "private"


def test_public_addresses_pass():
    resolve = _name_resolver(
        {"public.example.test": ["93.184.216.34", "2606:2800:220:1::1"]}
    )
    target = parse_url("https://public.example.test/", allow_http=False)
    assert [str(a) for a in vet(target, resolve=resolve)] == [
        "93.184.216.34",
        "2606:2800:220:1::1",
    ]
    assert address_class(ipaddress.ip_address("8.8.8.8")) is None


def test_the_allow_list_admits_only_its_own_networks():
    allow = [ipaddress.ip_network("127.0.0.0/8")]
    resolve = _name_resolver({"local.test": ["127.0.0.1"], "other.test": ["10.0.0.1"]})
    target = parse_url("http://local.test:8080/", allow_http=True)
    assert [str(a) for a in vet(target, resolve=resolve, allow=allow)] == ["127.0.0.1"]
    with pytest.raises(WebhookEndpointInvalid):
        vet(
            parse_url("http://other.test/", allow_http=True),
            resolve=resolve,
            allow=allow,
        )
    # The IPv4-mapped spelling of an allowed address is not in an IPv4 network.
    with pytest.raises(WebhookEndpointInvalid):
        vet(
            parse_url("http://[::ffff:127.0.0.1]/", allow_http=True),
            resolve=resolve,
            allow=allow,
        )


def test_a_name_that_does_not_resolve_is_a_transient_failure():
    def fails(host, port):
        raise OSError("no such host")

    target = parse_url("https://gone.example.test/", allow_http=False)
    with pytest.raises(WebhookDeliveryFailed):
        vet(target, resolve=fails)
    with pytest.raises(WebhookDeliveryFailed):
        vet(target, resolve=lambda host, port: [])


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/hook",  # plain http outside DEBUG
        "ftp://example.com/hook",
        "example.com/hook",
        "https://user:pass@example.com/hook",
        "https://example.com@10.0.0.1/hook",
        "https://example.com/hook#frag",
        "https:///hook",
        "https://example.com:99999/",
        "https://[fe80::1%25eth0]/",
        "https://1.2.3.4.5/",
        "https://0x1g.0.0.1/",
        "https://08.0.0.1/",
        "https://256.0.0.1/",
        "https://exa mple.com/",
        "https://example.com/\x00",
        "https://" + "a" * 3000 + ".com/",
    ],
)
def test_malformed_or_unsafe_urls_are_refused(url):
    with pytest.raises(WebhookEndpointInvalid):
        parse_url(url, allow_http=False)


def test_parsing_keeps_the_name_for_tls_and_the_host_header():
    target = parse_url(
        "https://Hooks.Example.Test.:8443/in?token=abc", allow_http=False
    )
    assert (target.scheme, target.host, target.port) == (
        "https",
        "hooks.example.test",
        8443,
    )
    assert target.path == "/in?token=abc"
    assert target.host_header == "hooks.example.test:8443"
    assert (
        parse_url("https://[2606:2800::1]/", allow_http=False).host_header
        == "[2606:2800::1]"
    )


def test_displayed_urls_never_carry_a_query_or_credentials():
    assert (
        display_url("https://u:p@hooks.test:8443/in?token=s3cret")
        == "https://hooks.test:8443/in?…"
    )
