"""Where a webhook may go: the URL rules and the address screen (SSRF).

An endpoint URL is parsed once (:func:`parse_url`): ``https`` only (``http``
too in DEBUG or with ``WEBHOOK_ALLOW_HTTP``), no credentials, no fragment.
Its host is resolved once per attempt through a resolver (injectable; the
tests' never touches DNS) and EVERY answer must be public, or inside a
network of ``WEBHOOK_ALLOW_NETWORKS``: loopback, private, link-local (the
cloud metadata address among them), CGNAT, ULA, multicast, reserved and
documentation ranges are refused, and so are IPv4-mapped, IPv4-compatible,
6to4, Teredo and NAT64 addresses that embed one of those. A refusal names
the address's class, never the address. The sender then connects to a
vetted address itself (:class:`Target`), so a second lookup can never
answer something else (DNS rebinding).

Hosts that look like IPv4 numbers are read the way browsers and the C
library read them (``127.1``, ``0x7f.1``, ``2130706433``, ``0177.0.0.1``),
so a literal cannot dodge the screen by its spelling.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from .errors import WebhookDeliveryFailed, WebhookEndpointInvalid

__all__ = [
    "Resolver",
    "Target",
    "address_class",
    "display_url",
    "parse_url",
    "system_resolver",
    "vet",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Sequence[str]]
"""``(host, port) -> [address, ...]``: the addresses a name resolves to."""

MAX_URL_LENGTH = 2048

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network
# Every IPv4 range that is not a public unicast destination, by class.
_IPV4_CLASSES: tuple[tuple[IPNetwork, str], ...] = (
    (_V4("0.0.0.0/8"), "unspecified"),
    (_V4("10.0.0.0/8"), "private"),
    (_V4("100.64.0.0/10"), "cgnat"),
    (_V4("127.0.0.0/8"), "loopback"),
    (_V4("169.254.169.254/32"), "metadata"),
    (_V4("169.254.0.0/16"), "link-local"),
    (_V4("172.16.0.0/12"), "private"),
    (_V4("192.0.0.0/24"), "reserved"),
    (_V4("192.0.2.0/24"), "documentation"),
    (_V4("192.88.99.0/24"), "reserved"),
    (_V4("192.168.0.0/16"), "private"),
    (_V4("198.18.0.0/15"), "reserved"),
    (_V4("198.51.100.0/24"), "documentation"),
    (_V4("203.0.113.0/24"), "documentation"),
    (_V4("224.0.0.0/4"), "multicast"),
    (_V4("240.0.0.0/4"), "reserved"),
)
_IPV6_CLASSES: tuple[tuple[IPNetwork, str], ...] = (
    (_V6("::/128"), "unspecified"),
    (_V6("::1/128"), "loopback"),
    (_V6("64:ff9b:1::/48"), "nat64"),
    (_V6("100::/64"), "reserved"),
    (_V6("2001:db8::/32"), "documentation"),
    (_V6("fc00::/7"), "ula"),
    (_V6("fe80::/10"), "link-local"),
    (_V6("fec0::/10"), "reserved"),
    (_V6("ff00::/8"), "multicast"),
)
_GLOBAL_UNICAST = _V6("2000::/3")
_NAT64 = _V6("64:ff9b::/96")
_IPV4_COMPATIBLE = _V6("::/96")


def address_class(address: IPAddress) -> str | None:
    """The class of a non-public address (``"loopback"``, ``"private"``...), or None.

    An IPv6 address that embeds an IPv4 one (mapped, compatible, NAT64,
    6to4, Teredo) is judged by the IPv4 address it reaches.
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return address_class(embedded)
        for network, name in _IPV6_CLASSES:
            if address in network:
                return name
        if address not in _GLOBAL_UNICAST:
            return "reserved"
    else:
        for network, name in _IPV4_CLASSES:
            if address in network:
                return name
    # A second layer: whatever this Python's registry calls non-global
    # (its tables grow with the IANA registries, CVE-2024-4032).
    return None if address.is_global else "reserved"


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client, where the packets go
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed endpoint URL: where to connect, and what to say to it."""

    scheme: str
    host: str
    """The host as written (lower case, IPv6 without brackets)."""
    port: int
    path: str
    """The path and query sent in the request line."""
    literal: IPAddress | None
    """The address when the host is one (no resolving)."""

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the name (and a port that is not the default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def display_url(url: str) -> str:
    """The URL reduced to origin and path: what errors, logs and pages show.

    A query string or credentials may hold tokens; they never leave here.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    if ":" in host:
        host = f"[{host}]"
    query = "?…" if parts.query else ""
    return f"{parts.scheme}://{host}{port}{parts.path}{query}"[:300]


def _invalid(cause: str, url: str, fix: str | None = None) -> WebhookEndpointInvalid:
    return WebhookEndpointInvalid(cause, fix=fix, meta={"url": display_url(url)})


def parse_url(url: str, *, allow_http: bool) -> Target:
    """Parse and check an endpoint URL (no resolving).

    Raises:
        WebhookEndpointInvalid: not an absolute ``https`` URL (``http`` when
            allowed), credentials in it, a fragment, an unreadable host or port.
    """
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise WebhookEndpointInvalid(
            f"an endpoint URL is a string of 1 to {MAX_URL_LENGTH} characters"
        )
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise _invalid("the endpoint URL holds spaces or control characters", url)
    try:
        parts: SplitResult = urlsplit(url)
        port = parts.port
    except ValueError:
        raise _invalid("the endpoint URL cannot be parsed", url) from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise _invalid(f"the endpoint URL's scheme is {scheme or 'missing'}", url)
    if scheme == "http" and not allow_http:
        raise _invalid(
            "plain http is refused outside DEBUG (the body and its signature "
            "would travel in clear)",
            url,
            fix="use https://; for an internal receiver on plain http, set "
            "ULTIMATE_JOBS['WEBHOOK_ALLOW_HTTP'] = True",
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise _invalid("credentials in the endpoint URL are refused", url)
    if parts.fragment:
        raise _invalid("the endpoint URL has a fragment", url)
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise _invalid("the endpoint URL has no host", url)
    literal = _literal(host, url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(
        scheme=scheme,
        host=str(literal) if literal is not None else host,
        port=port or (443 if scheme == "https" else 80),
        path=path,
        literal=literal,
    )


def _literal(host: str, url: str) -> IPAddress | None:
    """The address a host spells, read as a browser reads it, or None for a name."""
    if ":" in host:
        if "%" in host:
            raise _invalid("an IPv6 zone in the endpoint URL is refused", url)
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise _invalid("the endpoint URL's IPv6 host is malformed", url) from None
    labels = host.split(".")
    if not _numeric(labels[-1]):
        return None  # a name (the last label of a name is never a number)
    value = _ipv4_number(labels)
    if value is None:
        raise _invalid("the endpoint URL's host is a malformed IPv4 number", url)
    return ipaddress.IPv4Address(value)


def _numeric(label: str) -> bool:
    if label.startswith(("0x", "0X")):
        return all(c in "0123456789abcdefABCDEF" for c in label[2:])
    return label.isdigit() and label.isascii()


def _ipv4_number(labels: list[str]) -> int | None:
    # The WHATWG URL standard's IPv4 parser (also inet_aton's): up to four
    # parts, each decimal, 0x-hex or 0-octal; the last fills the remaining
    # bytes.
    if not 1 <= len(labels) <= 4:
        return None
    numbers = []
    for label in labels:
        if not _numeric(label):
            return None
        if label[:2].lower() == "0x":
            number = int(label[2:] or "0", 16)
        elif len(label) > 1 and label.startswith("0"):
            if any(c in "89" for c in label):
                return None
            number = int(label, 8)
        else:
            number = int(label)
        numbers.append(number)
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return value


def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``getaddrinfo`` answers for ``host`` (TCP)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def vet(
    target: Target,
    *,
    resolve: Resolver,
    allow: Iterable[IPNetwork] = (),
    url: str = "",
) -> list[IPAddress]:
    """The addresses the sender may connect to: every one public or allowed.

    Raises:
        WebhookEndpointInvalid: one address (literal or resolved) is not
            public and not in ``allow`` (terminal: no retry can fix it).
        WebhookDeliveryFailed: the name did not resolve (transient).
    """
    allowed = tuple(allow)
    if target.literal is not None:
        answers: list[IPAddress] = [target.literal]
    else:
        try:
            given = list(resolve(target.host, target.port))
        except (OSError, UnicodeError) as error:
            raise WebhookDeliveryFailed(
                f"the endpoint's host did not resolve ({type(error).__name__})",
                meta={"url": display_url(url)},
            ) from None
        answers = []
        for text in given:
            try:
                answers.append(ipaddress.ip_address(str(text).split("%", 1)[0]))
            except ValueError:
                raise _invalid(
                    "the resolver answered something that is not an address", url
                ) from None
        if not answers:
            raise WebhookDeliveryFailed(
                "the endpoint's host resolved to no address",
                meta={"url": display_url(url)},
            )
    for address in answers:
        kind = address_class(address)
        if kind is not None and not any(
            address.version == net.version and address in net for net in allowed
        ):
            raise WebhookEndpointInvalid(
                f"the endpoint resolves to a non-public address ({kind}), which "
                "webhooks never reach",
                meta={"url": display_url(url), "address_class": kind},
            )
    return answers
