"""Canonical URLs: the one clean form of every URL we hand out, and a looser key for deduplication.

Query strings are filtered pair by pair on the raw text, so the parameters we keep stay encoded
exactly as the site wrote them (re-encoding can change what a server answers).
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote, urlsplit, urlunsplit

from tools.base import InvalidInput

# Parameters that only identify a campaign, click or share; never what the page is.
TRACKING_PARAMS = frozenset({
    "fbclid", "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "msclkid", "yclid", "twclid", "ttclid",
    "li_fat_id", "igshid", "igsh", "mc_cid", "mc_eid", "mkt_tok", "_hsenc", "_hsmi", "hsctatracking",
    "ref", "ref_src", "ref_url", "referrer", "cmpid", "icid", "ncid", "ocid",
    "s_cid", "spm", "scid", "trk", "trkcampaign", "vero_id", "vero_conv", "oly_anon_id", "oly_enc_id",
    "rb_clickid", "_ga", "_gl", "wt.mc_id", "wt_mc_id", "at_medium", "at_campaign", "guccounter",
    "guce_referrer", "guce_referrer_sig", "__s", "si",
})
TRACKING_PREFIXES = ("utm_", "pk_", "mtm_", "hmb_", "itm_", "__hs")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_PERCENT_RE = re.compile(r"%[0-9a-fA-F]{2}")


def _is_tracking(raw_name: str) -> bool:
    name = unquote(raw_name.replace("+", " ")).strip().lower()
    return name in TRACKING_PARAMS or name.startswith(TRACKING_PREFIXES)


def _clean_query(query: str) -> list[str]:
    return [pair for pair in query.split("&") if pair and not _is_tracking(pair.split("=", 1)[0])]


def _clean_path(path: str) -> str:
    if not path:
        return "/"
    # Resolve ./ and ../ segments the way a browser would; keep a meaningful trailing slash.
    trailing = path.endswith("/")
    norm = posixpath.normpath(path)
    norm = "/" + norm.lstrip("/") if norm != "." else "/"
    if trailing and not norm.endswith("/"):
        norm += "/"
    return _PERCENT_RE.sub(lambda m: m.group(0).upper(), norm)


def _host_port(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url.strip())
    try:
        host = parts.hostname or ""
        port = parts.port
    except ValueError as e:  # e.g. a port that is not a number
        raise InvalidInput(f"not a valid URL: {url[:200]!r} ({e})") from None
    if not parts.scheme or not host:
        raise InvalidInput(f"not an absolute URL: {url[:200]!r}: give scheme and host, e.g. https://example.com/")
    return parts.scheme.lower(), host.lower().rstrip("."), port


def canonical_url(url: str) -> str:
    """Clean form: lower-case scheme and host, no credentials, default port, fragment or tracking."""
    scheme, host, port = _host_port(url)
    parts = urlsplit(url.strip())
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None or _DEFAULT_PORTS.get(scheme) == port else f"{host}:{port}"
    query = "&".join(_clean_query(parts.query))
    return urlunsplit((scheme, netloc, _clean_path(parts.path), query, ""))


def dedup_key(url: str) -> str:
    """A key equal for URLs that show the same page: scheme, www., trailing slash and order ignored."""
    canon = urlsplit(canonical_url(url))
    host = canon.netloc.removeprefix("www.")
    path = canon.path.rstrip("/") or "/"
    query = "&".join(sorted(canon.query.split("&"))) if canon.query else ""
    return f"{host}{path}" + (f"?{query}" if query else "")


def host_of(url: str) -> str:
    """Lower-case host name of a URL (no port), or InvalidInput."""
    return _host_port(url)[1]
